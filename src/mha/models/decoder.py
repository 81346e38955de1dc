"""A tiny GPT-style decoder on ``mha.MultiHeadAttention``: causal training, cached generation."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    require_callable,
    require_features,
    require_finite,
    require_flag,
    require_generator,
    require_head_mask,
    require_int,
    require_int_tensor,
    require_module,
    require_module_device,
    require_number,
    require_optional_int,
    require_seed,
    require_tensor,
    require_token_ids,
)
from mha.layers.kv_cache import KVCache
from mha.layers.latent_attention import LatentCache, MultiHeadLatentAttention
from mha.layers.multi_head import MultiHeadAttention
from mha.tasks.neighbour_task import cross_entropy
from mha.tasks.training_guard import evaluating


def require_decoder_attention(name: str, attn: object, embed_dim: int) -> nn.Module:
    """``attn`` if a decoder block can call it: a :class:`mha.MultiHeadAttention` or
    :class:`mha.MultiHeadLatentAttention` of width ``embed_dim`` whose ``forward`` takes
    ``is_causal`` and ``cache`` (a subclass with another ``forward``, such as
    :class:`mha.RotaryMultiHeadAttention`, does not). Else the first forward would fail
    inside the block."""
    require_module(name, attn, (MultiHeadAttention, MultiHeadLatentAttention))
    if type(attn).forward not in (MultiHeadAttention.forward, MultiHeadLatentAttention.forward):
        raise ValueError(f"{name} must be a layer whose forward takes is_causal and cache "
                         f"(mha.MultiHeadAttention or mha.MultiHeadLatentAttention), got "
                         f"{type(attn).__name__}, whose forward has other arguments")
    if attn.embed_dim != embed_dim:
        raise ValueError(f"{name} has width {attn.embed_dim}, but embed_dim is {embed_dim}: "
                         f"they must be equal")
    # self-attention passes no key or value: they default to x, so kdim and vdim must be
    # embed_dim too (else the first forward fails asking for a key the block never passes)
    sizes = (getattr(attn, "kdim", embed_dim), getattr(attn, "vdim", embed_dim))
    if sizes != (embed_dim, embed_dim):
        raise ValueError(f"{name} has kdim={sizes[0]} and vdim={sizes[1]}, but a decoder block "
                         f"is self-attention (keys and values are x, of width {embed_dim}): "
                         f"make it without kdim and vdim (or with kdim=vdim={embed_dim})")
    return attn


def _require_asked_heads(layer: nn.Module, asked: dict[str, int | None]) -> None:
    """``num_heads``/``num_kv_heads`` given with ``make_attention`` must be the made layer's:
    the layer decides them, and a different number would be silently ignored."""
    for name, value in asked.items():
        if value is None:
            continue
        value = require_int(name, value)
        has = getattr(layer, name, None)
        if has is None:  # MultiHeadLatentAttention has no key/value heads
            raise ValueError(f"{name}={value!r} was given with make_attention, but "
                             f"make_attention() builds a {type(layer).__name__}, which has no "
                             f"{name}: leave {name} out")
        if value != has:
            raise ValueError(f"{name}={value!r} was given with make_attention, but "
                             f"make_attention() builds a {type(layer).__name__} with "
                             f"{name}={has}: the layer decides its heads; leave {name} out or "
                             f"give {has}")


class DecoderBlock(nn.Module):
    r"""One pre-norm decoder block: ``x + Attn(LN(x))`` (causal), then ``x + MLP(LN(x))``.

    ``attn`` is any of the course's self-attention layers that accepts
    ``(x, is_causal=True, need_weights=False, cache=..., head_mask=...)``:
    :class:`mha.MultiHeadAttention` (with or without ``num_kv_heads``) or
    :class:`mha.MultiHeadLatentAttention`.

    Raises ``ValueError`` naming ``attn`` (not a self-attention layer of width ``embed_dim``,
    with ``kdim`` and ``vdim`` equal to it, that takes a cache), ``embed_dim`` or
    ``mlp_dim``; :class:`mha.MemoryBudgetError` when the MLP would exceed the memory budget.
    """

    def __init__(self, attn: nn.Module, embed_dim: int, mlp_dim: int) -> None:
        super().__init__()
        embed_dim, mlp_dim = require_int("embed_dim", embed_dim), require_int("mlp_dim", mlp_dim)
        require_decoder_attention("attn", attn, embed_dim)
        check_allocation("DecoderBlock's MLP", (embed_dim, mlp_dim), torch.get_default_dtype(),
                         f"use a smaller embed_dim ({embed_dim}) or mlp_dim ({mlp_dim})")
        self.norm1 = nn.LayerNorm(embed_dim)
        self.attn = attn
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, mlp_dim), nn.GELU(),
                                 nn.Linear(mlp_dim, embed_dim))

    def forward(self, x: torch.Tensor, *, cache=None,
                head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: ``(B, n, d)``, the next ``n`` tokens after those in ``cache``. NaN and inf
        in ``x`` reach the outputs (the rule of :func:`mha.attention`).

        ``x`` floating, in the module's dtype; returns ``(B, n, d)``. Raises ``ValueError``
        naming ``x``, ``cache`` or ``head_mask`` for a wrong type, shape, dtype or device (from
        the attention layer for the last two); :class:`mha.MemoryBudgetError` when the
        activations would exceed the memory budget."""
        require_features("x", x, self.norm1.normalized_shape[0], self)
        check_output_allocation("DecoderBlock's activations", "x", x,
                                (*x.shape[:-1], max(x.shape[-1], self.mlp[0].out_features)),
                                x.dtype, "use fewer or shorter sequences")
        attended, _ = self.attn(self.norm1(x), is_causal=True, need_weights=False, cache=cache,
                                head_mask=head_mask)
        x = x + attended
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    r"""A byte-level GPT: token and learned position embeddings, pre-norm causal blocks, and a
    read-out tied to the token embedding.

    ``logits = LN(block_L(... block_1(E[x] + P[positions]))) E^T``: at every position the
    scores of the next token. Position ``i`` sees tokens ``0..i`` only (a causal mask), so one
    forward pass trains all ``n`` next-token predictions of a sequence at once.

    Args:
        vocab_size: number of token values (256 for bytes).
        max_len: the longest sequence (number of learned position vectors).
        embed_dim: width d of the residual stream.
        num_heads: query heads per layer (default 8).
        num_kv_heads: key/value heads per layer (default ``num_heads``; 1 is multi-query).
            With ``make_attention`` the made layer decides both: give them only to state
            what it has (a value it does not have is refused).
        num_layers: number of blocks.
        mlp_dim: hidden width of the MLPs (default ``4 * embed_dim``).
        make_attention: optional factory returning each block's attention layer (for
            example a :class:`mha.MultiHeadLatentAttention`); default
            ``MultiHeadAttention(embed_dim, num_heads, num_kv_heads=num_kv_heads)``.

    ``torch.compile(model, fullgraph=True)`` traces a forward pass in one graph, with or
    without ``caches``; a decode loop feeding one token at a time with the caches compiles
    once when the prompt goes through the eager model, as for
    :class:`mha.MultiHeadAttention` (``benchmarks/compiled_decoding.py``); the first new
    batch size adds one graph, and a prompt through the compiled model makes three graphs
    (a new prompt length one more). The check that token ids lie in the
    vocabulary reads them, so it runs in eager mode only (compiled, ``nn.Embedding``'s own
    index check remains). :func:`mha.generate` itself does not compile (a Python loop).
    Its attention takes PyTorch's fused kernel, which has no forward-mode AD and no double
    backward on the CPU (a gradient penalty fails): run the forward under
    ``torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)`` for those (see
    :class:`mha.MultiHeadAttention`).

    Raises ``ValueError`` naming a bad size or ``make_attention`` (not a function, a module
    itself, one returning the same layer twice, or a layer a block cannot call, e.g. one
    with ``kdim`` or ``vdim`` other than ``embed_dim``, or with another dtype or device than
    the decoder's other weights), or ``num_heads``/``num_kv_heads`` together with
    ``make_attention`` when the made layer has other numbers of heads;
    :class:`mha.MemoryBudgetError` when the weights would exceed the memory budget.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        *,
        embed_dim: int = 64,
        num_heads: int | None = None,
        num_kv_heads: int | None = None,
        num_layers: int = 2,
        mlp_dim: int | None = None,
        make_attention: Callable[[], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        vocab_size, max_len = require_int("vocab_size", vocab_size), require_int("max_len",
                                                                                 max_len)
        embed_dim, num_layers = require_int("embed_dim", embed_dim), require_int("num_layers",
                                                                                 num_layers)
        mlp_dim = require_optional_int("mlp_dim", mlp_dim)  # 0 is an error, not the default
        check_allocation("TinyDecoder's embeddings", (vocab_size + max_len, embed_dim),
                         torch.get_default_dtype(),
                         f"use a smaller vocab_size ({vocab_size}), max_len ({max_len}) or "
                         f"embed_dim ({embed_dim})")
        width = 4 * embed_dim if mlp_dim is None else mlp_dim
        check_allocation("TinyDecoder's blocks", (num_layers, 4 * embed_dim * embed_dim
                                                  + 2 * embed_dim * width),
                         torch.get_default_dtype(),
                         f"use a smaller num_layers ({num_layers}), embed_dim ({embed_dim}) "
                         f"or mlp_dim ({width})")
        # with make_attention, num_heads and num_kv_heads are only compared with the made
        # layer (None: not given); without it they build the default layer
        asked = {"num_heads": num_heads, "num_kv_heads": num_kv_heads}
        if make_attention is None:
            asked = {}
            heads = 8 if num_heads is None else num_heads

            def make_attention():
                return MultiHeadAttention(embed_dim, heads, num_kv_heads=num_kv_heads)
        elif isinstance(make_attention, nn.Module):
            raise ValueError(f"make_attention must be a function that builds a new layer for "
                             f"each block (e.g. lambda: {type(make_attention).__name__}(...)), "
                             f"got the module {type(make_attention).__name__} itself")
        else:
            require_callable("make_attention", make_attention)
        self.vocab_size, self.max_len = vocab_size, max_len
        # small embeddings (GPT-2 draws them with standard deviation 0.02): the tied read-out
        # then starts with logits near zero, a near-uniform prediction, instead of confidently
        # wrong random ones
        self.token_embedding = nn.Embedding(vocab_size, embed_dim)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        self.position_embedding = nn.Parameter(0.02 * torch.randn(max_len, embed_dim))
        blocks = []
        for _ in range(num_layers):  # attention, then its block: the order of the random draws
            layer = require_decoder_attention("make_attention()", make_attention(), embed_dim)
            _require_asked_heads(layer, asked)
            # a layer in another dtype or on another device fails only at the first forward,
            # with a message about a query the caller never passed
            held = self.position_embedding
            for name, param in layer.named_parameters():
                if param.dtype != held.dtype or param.device != held.device:
                    raise ValueError(
                        f"make_attention() builds a layer whose {name} is {param.dtype} on "
                        f"{param.device}, but the decoder's other weights are {held.dtype} on "
                        f"{held.device}: build the layer with the defaults and convert the "
                        f"whole decoder afterwards, e.g. TinyDecoder(...).to({param.dtype})")
            if any(block.attn is layer for block in blocks):
                raise ValueError("make_attention must build a new layer at each call, not "
                                 "return the same one (blocks would share weights and caches)")
            blocks.append(DecoderBlock(layer, embed_dim, width))
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(embed_dim)

    def new_caches(self) -> list:
        """One empty cache per layer: a ``KVCache``, or a ``LatentCache`` for latent attention.

        Raises nothing."""
        return [block.attn.new_cache() if isinstance(block.attn, MultiHeadLatentAttention)
                else KVCache() for block in self.blocks]

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        caches: list | None = None,
        head_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        r"""Next-token scores ``(B, n, vocab_size)`` for integer ``tokens`` ``(B, n)``.

        With ``caches`` (from :meth:`new_caches`), ``tokens`` continue the sequence the caches
        hold: they sit at positions ``len(cache) ..``, and their keys and values are added to
        the caches. ``head_mask``: gates of shape ``(layers, heads)``, layer ``l``'s heads
        multiplied by row ``l`` (Michel et al. 2019).

        Raises ``ValueError`` naming the argument for ``tokens`` that are not int64/int32 ids
        in ``0 .. vocab_size - 1`` of shape ``(batch, n)`` fitting ``max_len`` after the
        cached ones (or on another device than the model), ``caches`` not made by
        :meth:`new_caches` (of unequal lengths, of another batch size, or one cache object
        given for two layers), a bad ``head_mask`` (every row is checked before any cache
        grows);
        :class:`mha.MemoryBudgetError` before an over-budget allocation. A call that raises
        leaves the caches as they were (a later layer's error puts back what earlier layers
        added).
        """
        # the message of generate and bits_per_byte: uint8 is an integer tensor too, and
        # "must be an integer tensor" did not say which ones nn.Embedding takes
        require_token_ids("tokens", tokens, self.token_embedding.num_embeddings)
        # else torch fails inside the embedding or the position table (or, the model on
        # meta, returns meta logits without a word)
        require_module_device("tokens", tokens, self, "model")
        if caches is not None:
            if not isinstance(caches, list | tuple) or len(caches) != len(self.blocks):
                # len() of a 0-d tensor raises TypeError: the length of a list or tuple only
                length = (f" of length {len(caches)}" if isinstance(caches, list | tuple)
                          else "")
                raise ValueError(f"caches must be a list of one cache per layer "
                                 f"({len(self.blocks)}), as model.new_caches() makes, got "
                                 f"{type(caches).__name__}{length}")
            for layer, cache in enumerate(caches):
                if not isinstance(cache, KVCache | LatentCache):
                    raise ValueError(f"caches must hold KVCache or LatentCache objects (from "
                                     f"model.new_caches()), got {type(cache).__name__}")
                # one object for two layers: each layer would append to it and attend over
                # the other's keys too, wrong logits with no error
                if any(cache is other for other in caches[:layer]):
                    raise ValueError(f"caches holds one cache object for more than one layer "
                                     f"(layer {layer} repeats an earlier one): each layer "
                                     f"needs its own; use model.new_caches()")
            lengths = [len(cache) for cache in caches]
            # compared, not put in a set: hashing a traced length would fix it to one value
            if any(length != lengths[0] for length in lengths[1:]):
                raise ValueError(f"the caches hold different numbers of tokens "
                                 f"{[len(cache) for cache in caches]}: use fresh ones")
        past = 0 if caches is None else len(caches[0])
        if tokens.dim() != 2 or tokens.shape[1] < 1 or past + tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens must have shape (batch, n) with 1 <= {past} + n <= "
                             f"max_len = {self.max_len}, got {tuple(tokens.shape)}")
        held = None if caches is None else (
            caches[0].keys if isinstance(caches[0], KVCache) else caches[0].latents)
        if held is not None and held.shape[0] != tokens.shape[0]:
            raise ValueError(f"caches hold a batch of {held.shape[0]} sequences, tokens has "
                             f"{tokens.shape[0]}: use one set of caches per batch "
                             f"(model.new_caches())")
        if head_mask is not None and (not isinstance(head_mask, torch.Tensor)
                                      or head_mask.dim() != 2
                                      or head_mask.shape[0] != len(self.blocks)):
            raise ValueError(f"head_mask must have shape (layers, heads) with "
                             f"{len(self.blocks)} layers, got "
                             f"{tuple(getattr(head_mask, 'shape', ()))}")
        n = tokens.shape[1]
        if head_mask is not None:  # each layer's gates now: a raise in layer 2 would leave
            for layer, block in enumerate(self.blocks):  # layer 1's cache one call ahead
                weight = block.attn.out_proj.weight
                require_head_mask(head_mask[layer], block.attn.num_heads, tokens.shape[0],
                                  weight.dtype, weight.device)
        # the widest activation: the logits, the MLP's hidden layer or the residual stream
        width = max(self.vocab_size, self.token_embedding.embedding_dim,
                    *(block.mlp[0].out_features for block in self.blocks))
        check_output_allocation("TinyDecoder's activations", "tokens", tokens,
                                (tokens.shape[0], n, width), self.token_embedding.weight.dtype,
                                "use smaller batches or shorter sequences")
        x = self.token_embedding(tokens) + self.position_embedding[past:past + n]
        if caches is None or torch.compiler.is_compiling():  # compiled: nothing raises midway
            x = self._blocks(x, caches, head_mask)
        else:
            # a layer that raises (its own budget, e.g. an MLA layer among MHA ones) would
            # leave the earlier layers' caches one call ahead: put them back. A cache grows by
            # replacing its tensors (torch.cat), so keeping the old references is enough
            held = [dict(vars(cache)) for cache in caches]
            try:
                x = self._blocks(x, caches, head_mask)
            except BaseException:
                for cache, state in zip(caches, held, strict=True):
                    vars(cache).clear()
                    vars(cache).update(state)
                raise
        return self.norm(x) @ self.token_embedding.weight.T  # read-out tied to the embedding

    def _blocks(self, x: torch.Tensor, caches: list | None,
                head_mask: torch.Tensor | None) -> torch.Tensor:
        """The residual stream ``(B, n, d)`` through every block, each with its cache."""
        for layer, block in enumerate(self.blocks):
            x = block(x, cache=None if caches is None else caches[layer],
                      head_mask=None if head_mask is None else head_mask[layer])
        return x


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of next-token scores ``(B, n, V)`` against targets ``(B, n)``, in nats.

    ``targets``: int64 or int32 ids (as TinyDecoder takes); F.cross_entropy wants int64.
    Computed (and returned) in float32 at least: float16 and bfloat16 logits are widened.
    The loss of :func:`mha.tasks.neighbour_task.cross_entropy`, with its checks: raises
    ``ValueError`` naming ``logits`` or ``targets`` for a wrong type, a shape other than the
    logits' ``(B, n)`` (flattened, ``(n, B)`` targets paired each score with another position's
    token, silently: tester 46), another device, ids outside the vocabulary, or no scored
    position (every target ``-100``, which is ignored: the mean of nothing is NaN)."""
    return cross_entropy(logits, targets)


@torch.no_grad()
def generate(
    model: TinyDecoder,
    prompt: torch.Tensor,
    steps: int,
    *,
    use_cache: bool = True,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Extend ``prompt`` ``(B, n)`` by ``steps`` tokens, one at a time; returns ``(B, n + steps)``.

    ``prompt``: integer token ids (int64 or int32); the result is int64 (``steps=0`` too).

    ``temperature=0`` picks the most likely token (greedy); otherwise tokens are sampled from
    ``softmax(logits / temperature)`` with ``generator``. With ``use_cache`` the prompt goes
    through the model once and every later step feeds only the newest token, reading the
    earlier keys and values from the caches; without it every step recomputes the whole
    sequence. In float32 and float64 both give the same tokens; in bfloat16 or float16 the two
    paths round differently and may pick another token at a near tie. The result is a new
    tensor (``steps=0`` too: a copy of ``prompt``, never ``prompt`` itself). There is no
    padding: every row is continued after its last token, so a row padded at the end would
    continue from the pad; batch prompts of one length (generate the others separately).

    The model runs in eval mode (no dropout) and gets the modes of its submodules back when
    the call returns or raises. Not for ``torch.compile``: a Python loop that reads every
    token; compile the model's step instead (see :class:`mha.TinyDecoder`).

    Thread safety: ``nn.Module``'s mode belongs to the module, not to the thread, so
    ``generate`` sets it for everyone: from the first of overlapping calls of ``generate`` or
    :func:`bits_per_byte` on one model (in any threads) until the last of them ends, the
    model is in eval mode, and the modes it had before the first come back only then (a
    per-model count under a lock). Another thread sharing the model sees ``training ==
    False`` meanwhile, and a training step it runs then has no dropout; a ``model.train()``
    it calls meanwhile is undone when the last call ends. Do not generate from a model
    another thread is training; generate from a copy (``copy.deepcopy(model)``) instead.

    Raises ``ValueError`` on a bad argument (named), on ``prompt`` ids outside
    ``0 .. vocab_size - 1`` or on another device than ``model``, on ``prompt length + steps >
    model.max_len``, and on NaN logits
    (a NaN weight); :class:`mha.MemoryBudgetError` when the tokens would exceed the budget.
    """
    require_module("model", model, TinyDecoder)
    steps = require_int("steps", steps, minimum=0)
    require_flag("use_cache", use_cache)
    # inf would sample uniformly, whatever the model says: a finite temperature or 0 (greedy)
    temperature = require_number("temperature", temperature, at_least=0.0)
    require_generator("generator", generator)
    require_tensor("prompt", prompt, "int")
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be an integer tensor of shape (batch, n >= 1), got "
                         f"{tuple(prompt.shape)}")
    check_output_allocation("generate's tokens", "prompt", prompt,
                            (prompt.shape[0], prompt.shape[1] + steps), torch.int64,
                            "use a smaller batch of prompts")
    require_token_ids("prompt", prompt, model.vocab_size)
    require_module_device("prompt", prompt, model, "model")  # before the mode changes
    if prompt.shape[1] + steps > model.max_len:
        raise ValueError(f"prompt length {prompt.shape[1]} + steps {steps} exceeds the model's "
                         f"max_len {model.max_len}")
    with evaluating(model):  # dropout off; the modes come back even if a step raises
        return _generate(model, prompt, steps, use_cache, temperature, generator)


def _generate(model: TinyDecoder, prompt: torch.Tensor, steps: int, use_cache: bool,
              temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """:func:`generate`'s loop, on checked arguments and a model in eval mode."""
    # a new int64 tensor even for steps=0 (an int32 prompt too): writing to it leaves prompt
    # alone, and every steps gives one dtype, as argmax and multinomial return int64
    tokens = prompt.to(torch.int64, copy=True)
    caches = model.new_caches() if use_cache else None
    new_input = prompt
    for _ in range(steps):
        logits = model(new_input if use_cache else tokens, caches=caches)[:, -1]  # (B, V)
        # argmax of NaN picks token 0 and multinomial fails deep in torch: say why here
        require_finite("the logits of model", logits, "check model's parameters (a NaN or "
                       "inf weight, e.g. from a diverged training run, reaches every logit)")
        if temperature == 0:
            next_token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            scaled = logits / temperature  # (B, V)
            if not bool(torch.isfinite(scaled).all()):  # else multinomial fails on NaN
                raise ValueError(f"temperature={temperature:g} is too small for "
                                 f"{logits.dtype} logits (logits / temperature overflows); "
                                 f"use temperature=0 for greedy decoding, or a larger one")
            probs = torch.softmax(scaled, dim=-1)
            next_token = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
        new_input = next_token
    return tokens


def train_decoder(
    model: nn.Module,
    data: torch.Tensor,
    steps: int,
    *,
    batch_size: int = 16,
    length: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
    stop_after: int | None = None,
) -> dict[str, float]:
    """Train ``model`` to predict the next token of random windows of ``data`` (1-D tokens).

    Adam with a cosine-decaying learning rate (:func:`mha.tasks.neighbour_task.train`), windows
    drawn with a generator seeded by ``seed``; ``stop_after`` runs only the first steps of the
    ``steps``-step schedule. Returns the last batch's loss and the seconds taken.

    The steps run in training mode; when the call returns or raises, ``model`` and each of its
    submodules are back in the mode they had (a new module is in training mode: call
    ``model.eval()`` before evaluating it with dropout off; :func:`mha.generate` and
    :func:`mha.bits_per_byte` do so themselves).

    ``data``: 1-D integer token ids, on ``model``'s device. Raises ``ValueError`` naming
    ``model``, ``data``, ``steps``, ``batch_size``, ``length`` (over ``max_len``), ``lr``,
    ``seed`` or ``stop_after``; :class:`mha.MemoryBudgetError` when a batch would exceed the
    memory budget.
    ``model`` is named when nothing in it is trainable, when it has float16 parameters (one
    Adam step makes them NaN: train in float32 or bfloat16), and when training diverges (a
    NaN or inf loss or parameter); the parameters are then put back as they were.
    """
    from mha.tasks.neighbour_task import train
    from mha.tasks.text_corpus import windows

    require_module("model", model)
    steps, length = require_int("steps", steps), require_int("length", length)
    _require_length_fits(model, length)
    seed = require_seed("seed", seed, minimum=None)  # manual_seed would say "expected a long"
    require_int_tensor("data", data)  # else the model would complain about "tokens"
    if hasattr(model, "vocab_size"):
        require_token_ids("data", data, model.vocab_size)
    require_module_device("data", data, model, "model")  # the windows are on data's device
    generator = torch.Generator().manual_seed(seed)
    # train() switches to training mode and ends in eval: give back every submodule's mode
    # (model.train(was_training) flattened a mix, e.g. one block left in eval, into one mode)
    modes = [(module, module.training) for module in model.modules()]
    try:
        return train(model, lambda step: windows(data, batch_size, length, generator), steps,
                     lr=lr, forward=model, stop_after=stop_after)
    finally:
        for module, mode in modes:
            module.training = mode


@torch.no_grad()
def bits_per_byte(
    model: nn.Module, data: torch.Tensor, *, length: int = 64, num_windows: int = 128,
    head_mask: torch.Tensor | None = None,
) -> float:
    r"""Mean next-token loss in bits, ``-log2 p(x_{t+1} | x_{<=t})``, on fixed windows of ``data``.

    The windows are the first ``num_windows`` non-overlapping stretches of ``length + 1``
    tokens, so every model is scored on the same text. A model that knows nothing (uniform over
    256 bytes) scores 8. The model runs in eval mode and gets its submodules' modes back when
    the call returns or raises. Thread safety: as in :func:`generate` (overlapping calls of
    either share one count): other threads sharing the model see eval mode until the last
    overlapping call ends, and the modes come back then.

    ``data``: 1-D integer token ids. Raises ``ValueError`` naming ``model``, ``data`` (not 1-D
    integer ids in the vocabulary, on another device than ``model``, or too short for
    ``num_windows`` windows), ``length`` (over ``max_len``), ``num_windows`` or
    ``head_mask``, or ``model`` when its loss is NaN (NaN
    or inf parameters); :class:`mha.MemoryBudgetError` when a window's activations would
    exceed the memory budget.
    """
    require_module("model", model)
    length, num_windows = require_int("length", length), require_int("num_windows", num_windows)
    _require_length_fits(model, length)
    require_int_tensor("data", data, dim=1)
    if hasattr(model, "vocab_size"):
        require_token_ids("data", data, model.vocab_size)
    require_module_device("data", data, model, "model")  # else torch fails inside the model
    stride = length + 1
    if num_windows * stride > data.numel():
        raise ValueError(f"num_windows={num_windows} windows of {stride} tokens need "
                         f"{num_windows * stride} tokens, data has {data.numel()}")
    chunks = data[: num_windows * stride].view(num_windows, stride)  # (W, length + 1)
    with evaluating(model):  # dropout off; the modes come back even if the model raises
        logits = model(chunks[:, :-1]) if head_mask is None else model(chunks[:, :-1],
                                                                       head_mask=head_mask)
    loss = language_model_loss(logits, chunks[:, 1:]).item()
    if math.isnan(loss):  # a metric of nan would pass for a number in a table
        raise ValueError("the loss of model is nan: check model's parameters (a NaN or inf "
                         "weight, e.g. from a diverged training run, reaches every logit)")
    return loss / math.log(2)


def _require_length_fits(model: nn.Module, length: int) -> None:
    """Windows of ``length`` tokens must fit the model's learned positions."""
    max_len = getattr(model, "max_len", None)
    if isinstance(max_len, int) and length > max_len:
        raise ValueError(f"length={length} exceeds the model's max_len={max_len}: windows must "
                         f"fit its learned positions")
