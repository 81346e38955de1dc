"""A tiny encoder-decoder (the chapter-7 encoder plus a decoder with cross-attention) and a
translation-like toy task, to compare pruning in the three kinds of attention (Michel et al.).

The task. A source "sentence" holds ``n`` words ``x_0 ... x_{n-1}`` from a vocabulary of ``V``.
Its "translation" has ``n`` words ``y_0 ... y_{n-1}``: the sentence is reversed, every word is
looked up in a fixed random dictionary ``T`` (a permutation of ``0..V-1``), and gets an
inflection bit ``b_i``, the XOR of the parity of the source word's left neighbour and the
parity of the target word two places back:

    y_i = 2 T[w_i] + b_i,   w_i = x_{n-1-i},   b_i = (x_{n-2-i} mod 2) XOR (y_{i-2} mod 2),

for ``i = 0 .. n-1`` (counted from 0, as the code indexes them), with ``x_{-1} = 0`` and
``y_{-2} = y_{-1} = 0``. Unrolled, ``b_i`` is the XOR of the parities of
``x_{n-2-i}, x_{n-i}, ...``: a function of the source alone. The encoder-decoder attention
must fetch ``w_i`` (and can fetch its neighbours); the bit can come through the encoder's
self-attention (bringing the neighbour's parity to ``w_i``), through the cross-attention, or
partly through the decoder's self-attention (``y_{i-2}`` is one position back in the decoder's
input ``target_in``). Which route a trained model takes is up to its training.

The agreement task (:func:`agreement_translation_batch`) gives each kind of attention a part of
its own. Target token ``y_i = 4 T[w_i] + 2 s_i + a_i`` holds the word ``T[w_i]`` (only the
encoder-decoder attention reads the source from the decoder), a *sense* bit ``s_i``, the parity
of ``w_i``'s left neighbour in the source (a word's translation depends on its neighbour: the
encoder's self-attention can bring it to ``w_i``), and an *agreement* bit ``a_i``: ``a_0, a_1``
are free random choices, absent from the source, and ``a_i = a_{i-2}`` after them (agreement
with the word two places back: only the decoder's self-attention can fetch it, since position
``i`` reads ``y_{i-1}`` and ``a_{i-1}`` says nothing about ``a_{i-2}``).
"""

from __future__ import annotations

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    require_flag,
    require_generator,
    require_gradients,
    require_int,
    require_int_tensor,
    require_module,
    require_module_device,
    require_no_nan,
    require_nonempty,
    require_optional_int,
    require_seed,
    require_tensor,
    require_token_ids,
    require_values,
)
from mha.layers.multi_head import MultiHeadAttention
from mha.models.encoder import EncoderBlock
from mha.tasks.training_guard import evaluating

#: The three kinds of attention of an encoder-decoder, in the order of ``head_mask`` rows.
KINDS = ("encoder self-attention", "decoder self-attention", "encoder-decoder attention")


def translation_dictionary(vocab_size: int, seed: int = 0) -> torch.Tensor:
    """The fixed random dictionary ``T``: a permutation of ``0..vocab_size-1``, ``(vocab_size,)``.

    int64. Raises ``ValueError`` naming ``vocab_size`` (an int >= 2) or ``seed``;
    :class:`mha.MemoryBudgetError` when the dictionary would exceed the memory budget."""
    vocab_size = require_int("vocab_size", vocab_size, minimum=2)
    seed = require_seed("seed", seed)
    check_allocation("translation_dictionary", (vocab_size,), torch.int64, "use a smaller "
                     "vocab_size")
    return torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))


def translate(source: torch.Tensor, dictionary: torch.Tensor) -> torch.Tensor:
    """The translation ``y`` ``(B, n)`` of ``source`` ``(B, n)`` (values in ``0..2V-1``), int64
    whatever the integer dtypes of ``source`` and ``dictionary``."""
    if (not isinstance(source, torch.Tensor) or source.dim() != 2
            or source.is_floating_point()):
        raise ValueError(f"source must be an integer tensor of shape (batch, n), got "
                         f"{tuple(getattr(source, 'shape', ()))}")
    dictionary = _require_permutation(dictionary)
    require_token_ids("source", source, dictionary.numel())
    words = source.flip(1).long()  # w_i = x_{n-1-i}: (B, n)
    # the left neighbour of w_i in the source, x_{n-2-i}, is the next entry of the flipped row
    neighbours = torch.cat([words[:, 1:], torch.zeros_like(words[:, :1])], dim=1)
    target = torch.zeros_like(words)
    for i in range(source.shape[1]):
        two_back = target[:, i - 2] if i >= 2 else torch.zeros_like(words[:, 0])
        bit = (neighbours[:, i] % 2) ^ (two_back % 2)
        target[:, i] = 2 * dictionary[words[:, i]] + bit
    return target


def translation_batch(
    batch_size: int, seq_len: int, dictionary: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random source sentences and their translations, ready for teacher forcing.

    Returns ``(source, target_in, target_out)``, each ``(B, n)``: ``target_in`` is the
    translation shifted right behind a start symbol ``2V`` (what the decoder reads) and
    ``target_out`` the translation itself (what it must predict at each position). The
    decoder therefore needs ``2V + 1`` input symbols and ``2V`` classes.

    All three int64. Raises ``ValueError`` naming ``batch_size``, ``seq_len``, ``dictionary``
    (not a permutation) or ``generator``; :class:`mha.MemoryBudgetError` when the batch would
    exceed the memory budget.
    """
    # require_int, as agreement_translation_batch: numpy integers (np.int64(4)) are ints too
    batch_size = require_int("batch_size", batch_size, minimum=2)
    seq_len = require_int("seq_len", seq_len, minimum=2)
    dictionary = _require_permutation(dictionary)
    require_generator("generator", generator, required=True)
    check_allocation("translation_batch", (3, batch_size, seq_len), torch.int64,
                     "use smaller batches")
    vocab = dictionary.numel()
    source = torch.randint(vocab, (batch_size, seq_len), generator=generator)
    target = translate(source, dictionary)
    start = torch.full((batch_size, 1), 2 * vocab)
    return source, torch.cat([start, target[:, :-1]], dim=1), target


def _require_permutation(dictionary: object) -> torch.Tensor:
    """The dictionary ``T``, a permutation of ``0..V-1`` (one target word per word), as int64:
    ``2 T[w]`` and ``4 T[w]`` in a narrower integer type wrap around, silently (tester 48:
    a uint8 dictionary of 200 words translated word 150 as 85, a valid class)."""
    require_int_tensor("dictionary", dictionary, dim=1)
    if dictionary.numel() < 2:
        raise ValueError(f"dictionary must hold a permutation of 0..V-1 with V >= 2, got "
                         f"{dictionary.numel()} entries")
    require_values("dictionary", dictionary)
    # the check sorts a copy (a stride-0 view costs nothing, its sort does)
    check_output_allocation("the permutation check", "dictionary", dictionary,
                            (2, dictionary.numel()), torch.int64, "use a smaller vocabulary")
    # as int64 first: torch compares no unsigned type of 16 bits or more with int64 (tester 49)
    dictionary = dictionary.long()
    if not torch.equal(dictionary.sort().values.cpu(), torch.arange(dictionary.numel())):
        raise ValueError("dictionary must be a permutation of 0..V-1 (each word once), as "
                         "translation_dictionary(V) makes; it repeats or skips a value")
    return dictionary


#: The agreement task's first target positions, whose agreement bit is a free choice that no
#: model can predict: its accuracies count positions ``FREE_POSITIONS .. n-1`` only.
FREE_POSITIONS = 2


def agreement_translation_batch(
    batch_size: int, seq_len: int, dictionary: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Random sentences of the agreement task and their translations, for teacher forcing.

    ``y_i = 4 T[w_i] + 2 s_i + a_i`` with ``w_i = x_{n-1-i}`` (reversed), the sense bit
    ``s_i = x_{n-2-i} mod 2`` (``x_{-1} = 0``), the agreement bit ``a_0, a_1`` drawn at random
    and ``a_i = a_{i-2}`` for ``i >= 2``. Returns ``(source, target_in, target_out)``, each
    ``(B, n)`` int64: ``target_in`` is the translation shifted right behind the start symbol
    ``4V``, so the decoder needs ``4V + 1`` input symbols and ``4V`` classes.

    Raises ``ValueError`` naming ``batch_size``, ``seq_len`` (ints >= 2; ``seq_len`` > 2, so
    that some agreement bit is not free), ``dictionary`` (not a permutation) or ``generator``;
    :class:`mha.MemoryBudgetError` when the batch would exceed the memory budget.
    """
    batch_size = require_int("batch_size", batch_size, minimum=2)
    seq_len = require_int("seq_len", seq_len, minimum=FREE_POSITIONS + 1)
    dictionary = _require_permutation(dictionary)
    require_generator("generator", generator, required=True)
    check_allocation("agreement_translation_batch", (4, batch_size, seq_len), torch.int64,
                     "use smaller batches")
    vocab = dictionary.numel()
    source = torch.randint(vocab, (batch_size, seq_len), generator=generator)
    words = source.flip(1)  # w_i = x_{n-1-i}: (B, n)
    # the left neighbour of w_i in the source, x_{n-2-i}, is the next entry of the flipped row
    sense = torch.cat([words[:, 1:], torch.zeros_like(words[:, :1])], dim=1) % 2  # (B, n)
    free = torch.randint(2, (batch_size, FREE_POSITIONS), generator=generator)
    agreement = free.repeat(1, seq_len // FREE_POSITIONS + 1)[:, :seq_len]  # a_i = a_{i-2}
    target = 4 * dictionary[words] + 2 * sense + agreement
    start = torch.full((batch_size, 1), 4 * vocab)
    return source, torch.cat([start, target[:, :-1]], dim=1), target


class CrossDecoderBlock(nn.Module):
    r"""A pre-norm decoder block with cross-attention:
    ``y + SelfAttn(LN(y))`` (causal), ``y + CrossAttn(LN(y), memory)``, ``y + MLP(LN(y))``."""

    def __init__(self, embed_dim: int, num_heads: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads)
        self.norm3 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, mlp_dim), nn.GELU(),
                                 nn.Linear(mlp_dim, embed_dim))

    def forward(self, y: torch.Tensor, memory: torch.Tensor,
                self_gates: torch.Tensor | None = None,
                cross_gates: torch.Tensor | None = None) -> torch.Tensor:
        """``y``: ``(B, n_y, d)``; ``memory``: the encoder's output ``(B, n_x, d)``."""
        y = y + self.self_attn(self.norm1(y), is_causal=True, need_weights=False,
                               head_mask=self_gates)[0]
        y = y + self.cross_attn(self.norm2(y), memory, need_weights=False,
                                head_mask=cross_gates)[0]
        return y + self.mlp(self.norm3(y))


class TinyTranslator(nn.Module):
    r"""An encoder-decoder transformer: ``num_layers`` chapter-7 encoder blocks
    (:class:`mha.EncoderBlock`) over the source, ``num_layers`` decoder blocks with causal
    self-attention and cross-attention over the target, learned positions, a linear read-out.

    ``forward(source, target_in, head_mask)`` returns scores ``(B, n_y, num_classes)``;
    ``head_mask`` ``(3, layers, heads)`` gates the heads of the three kinds of attention,
    in the order of :data:`mha.models.seq2seq.KINDS` (encoder self-attention, decoder
    self-attention, encoder-decoder attention).

    Raises ``ValueError`` naming a bad size; :class:`mha.MemoryBudgetError` when the weights
    would exceed the memory budget.
    """

    def __init__(
        self,
        source_vocab: int,
        target_vocab: int,
        num_classes: int,
        max_len: int,
        *,
        embed_dim: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        mlp_dim: int | None = None,
    ) -> None:
        super().__init__()
        source_vocab = require_int("source_vocab", source_vocab)
        target_vocab = require_int("target_vocab", target_vocab)
        num_classes, max_len = require_int("num_classes", num_classes), require_int("max_len",
                                                                                   max_len)
        num_layers = require_int("num_layers", num_layers)
        embed_dim, num_heads = require_int("embed_dim", embed_dim), require_int("num_heads",
                                                                                num_heads)
        mlp_dim = require_optional_int("mlp_dim", mlp_dim)  # 0 is an error, not the default
        mlp_dim = 2 * embed_dim if mlp_dim is None else mlp_dim
        check_allocation("TinyTranslator's embeddings", (source_vocab + target_vocab
                         + 2 * max_len + num_classes, embed_dim), torch.get_default_dtype(),
                         f"use a smaller source_vocab ({source_vocab}), target_vocab "
                         f"({target_vocab}), num_classes ({num_classes}), max_len ({max_len}) "
                         f"or embed_dim ({embed_dim})")
        check_allocation("TinyTranslator's blocks", (3 * num_layers, 4 * embed_dim * embed_dim
                                                     + 2 * embed_dim * mlp_dim),
                         torch.get_default_dtype(),
                         f"use a smaller num_layers ({num_layers}), embed_dim ({embed_dim}) "
                         f"or mlp_dim ({mlp_dim})")
        self.num_layers, self.num_heads, self.max_len = num_layers, num_heads, max_len
        self.source_embedding = nn.Embedding(source_vocab, embed_dim)
        self.target_embedding = nn.Embedding(target_vocab, embed_dim)
        self.source_positions = nn.Parameter(torch.randn(max_len, embed_dim))
        self.target_positions = nn.Parameter(torch.randn(max_len, embed_dim))
        self.encoder = nn.ModuleList(EncoderBlock(embed_dim, num_heads, mlp_dim)
                                     for _ in range(num_layers))
        self.encoder_norm = nn.LayerNorm(embed_dim)
        self.decoder = nn.ModuleList(CrossDecoderBlock(embed_dim, num_heads, mlp_dim)
                                     for _ in range(num_layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, num_classes)

    def _require_uniform_heads(self) -> None:
        """Every attention layer must still have ``num_heads`` heads: ``head_mask`` gates
        ``(3, layers, heads)``, one row per layer, and a layer made smaller by
        :func:`mha.prune_heads` would refuse its row with a message about a mask the caller
        never passed."""
        layers = [(f"encoder[{i}].attn", b.attn) for i, b in enumerate(self.encoder)]
        for i, b in enumerate(self.decoder):
            layers += [(f"decoder[{i}].self_attn", b.self_attn),
                       (f"decoder[{i}].cross_attn", b.cross_attn)]
        for name, layer in layers:
            heads = getattr(layer, "num_heads", self.num_heads)
            if heads != self.num_heads:
                raise ValueError(f"model.{name} has {heads} heads but TinyTranslator gates "
                                 f"{self.num_heads} per layer (head_mask (3, layers, heads)); a "
                                 f"layer pruned with prune_heads cannot be gated with the others: "
                                 f"gate its heads off with head_mask (0 = removed, the same "
                                 f"outputs) instead of pruning it")

    def forward(
        self,
        source: torch.Tensor,
        target_in: torch.Tensor,
        head_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores ``(B, n_y, num_classes)`` for ``source`` ``(B, n_x)`` and ``target_in``
        ``(B, n_y)``; ``head_mask`` ``(3, layers, heads)`` as in the class docstring.

        ``source`` and ``target_in`` int64 or int32 ids; ``head_mask`` float or bool; the scores
        are floating, in the module's dtype. Raises ``ValueError`` naming ``source``,
        ``target_in`` (not integer ids in their vocabulary of one batch size, or longer than
        ``max_len``) or ``head_mask``; :class:`mha.MemoryBudgetError` when the activations would
        exceed the memory budget; ``ValueError`` for a float8 model (a storage format torch
        does not compute with)."""
        return self._forward(source, target_in, head_mask)[0]

    def _forward(self, source: torch.Tensor, target_in: torch.Tensor,
                 head_mask: torch.Tensor | None = None, memory: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward`'s checks and computation, returning ``(scores, memory)``, the
        encoder's output too. Given a ``memory`` that an earlier call on the same ``source``
        returned under the same encoder gates (``head_mask[0]``), the encoder is not run
        again: the pruning curves of the decoder's two kinds share one encoder pass
        (``_pruned_by_kind``); the scores are those of a full pass, bit for bit."""
        dtype = self.readout.weight.dtype
        if dtype.itemsize == 1:  # torch would stop at the first addition ("add_stub")
            raise ValueError(f"TinyTranslator's parameters are {dtype}, a storage format torch "
                             f"does not compute with (no matrix products or additions); "
                             f"convert the model with model.float() (or "
                             f"model.to(torch.bfloat16))")
        for name, tokens, vocab in [
                ("source", source, self.source_embedding.num_embeddings),
                ("target_in", target_in, self.target_embedding.num_embeddings)]:
            require_tensor(name, tokens, "int")
            if tokens.is_floating_point() or tokens.dim() != 2 \
                    or not 1 <= tokens.shape[1] <= self.max_len:
                raise ValueError(f"{name} must be an integer tensor of shape (batch, n) with "
                                 f"1 <= n <= {self.max_len}, got {tokens.dtype} of shape "
                                 f"{tuple(tokens.shape)}")
            # the widest activation made from these tokens: the MLPs' or the read-out's
            width = max(self.readout.in_features, self.readout.out_features,
                        self.encoder[0].mlp[0].out_features)
            check_output_allocation("TinyTranslator's activations", name, tokens,
                                    (*tokens.shape, width), self.readout.weight.dtype,
                                    "use smaller batches")
            require_token_ids(name, tokens, vocab)  # ids out of range: say so, not torch
            require_module_device(name, tokens, self, "model")  # as TinyDecoder (tester 48)
        if source.shape[0] != target_in.shape[0]:
            raise ValueError(f"source and target_in need the same batch size, got "
                             f"{tuple(source.shape)} and {tuple(target_in.shape)}")
        self._require_uniform_heads()
        shape = (len(KINDS), self.num_layers, self.num_heads)
        if head_mask is None:
            weight = self.readout.weight  # all gates open, in the model's dtype and device
            head_mask = torch.ones(shape, dtype=weight.dtype, device=weight.device)
        elif not isinstance(head_mask, torch.Tensor) or tuple(head_mask.shape) != shape:
            raise ValueError(f"head_mask must have shape {shape} (kinds, layers, heads), got "
                             f"{tuple(getattr(head_mask, 'shape', ()))}")
        encoder_gates, self_gates, cross_gates = head_mask.unbind(0)

        if memory is None:
            x = self.source_embedding(source) + self.source_positions[: source.shape[1]]
            for block, gates in zip(self.encoder, encoder_gates, strict=True):
                x, _ = block(x, head_mask=gates)
            memory = self.encoder_norm(x)
        y = self.target_embedding(target_in) + self.target_positions[: target_in.shape[1]]
        for block, s_gates, c_gates in zip(self.decoder, self_gates, cross_gates, strict=True):
            y = block(y, memory, self_gates=s_gates, cross_gates=c_gates)
        return self.readout(self.norm(y)), memory


def _check_targets(model: TinyTranslator, target_in: torch.Tensor, target_out: object,
                   name: str = "target_out") -> torch.Tensor:
    """``target_out`` the classes ``(B, n_y)`` of ``model``'s read-out, one per position of
    ``target_in`` (checked by the model's forward): torch would stop inside cross_entropy, or
    compare tensors of other shapes."""
    require_int_tensor(name, target_out, dim=2)
    if target_out.shape != target_in.shape:
        raise ValueError(f"{name} must have target_in's shape {tuple(target_in.shape)} (one "
                         f"class per target position), got {tuple(target_out.shape)}")
    return require_token_ids(name, target_out, model.readout.out_features)


def _scores(model: TinyTranslator, source: torch.Tensor, target_in: torch.Tensor,
            gates: torch.Tensor, memory: torch.Tensor | None = None,
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``model``'s scores and the encoder's output (``memory``: given, the encoder is not run
    again, see ``TinyTranslator._forward``), the scores refused when NaN: argmax takes NaN for
    the largest score and an accuracy of NaN logits would look like a real one."""
    scores, memory = model._forward(source, target_in, gates, memory)
    return require_no_nan("the scores of model", scores, "check model's parameters (a NaN or "
                          "inf weight, or a diverged training)"), memory


def _gates(model: TinyTranslator, shape: tuple[int, ...]) -> torch.Tensor:
    """All-open gates in the model's dtype and device: its head_mask refuses another float
    dtype, with a message about a mask the caller never passed."""
    weight = model.readout.weight
    return torch.ones(shape, dtype=weight.dtype, device=weight.device)


def kind_importance(
    model: TinyTranslator, batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
) -> torch.Tensor:
    r"""Head importance after Michel et al. for every head of ``model``, shape
    ``(3, layers, heads)`` (kinds in the order of :data:`mha.models.seq2seq.KINDS`):
    ``sum_B |dL_B / d xi|``, the absolute gradient of each batch's *mean* cross-entropy
    ``L_B`` with respect to the head's gate, summed over the batches, then each layer's scores
    divided by their l2 norm (a batch variant of the paper's per-example ``E |dL/d xi|``, as
    :func:`mha.head_importance` computes). ``batches`` hold ``(source, target_in, target_out)``.

    The result has the model's dtype. Raises ``ValueError`` naming ``model`` (not a
    :class:`TinyTranslator`), ``batches`` (none, or an item that is not a triple),
    ``target_out`` (not the model's classes, or not one per position of ``target_in``), or a
    NaN or inf loss or gradient (the importances would be NaN).

    The model runs in eval mode (no dropout) and gets its submodules' modes back.
    """
    from mha.tasks.neighbour_task import cross_entropy

    require_module("model", model, TinyTranslator)
    batches = require_nonempty("batches", batches, " (the importance is an average over them)")
    require_gradients("kind_importance")
    shape = (len(KINDS), model.num_layers, model.num_heads)
    gate_dtype = model.readout.weight.dtype
    # a running sum over the batches: in float16 it would pass 65,504 (inf) and in bfloat16
    # stall once the total dwarfs a batch's gradient, so it is kept in float32 at least and
    # cast back at the end, as head_importance does (float32 and float64 as before)
    total = torch.zeros(shape, dtype=torch.promote_types(gate_dtype, torch.float32),
                        device=model.readout.weight.device)
    # gradients of the model's eval-mode loss (no dropout), the modes put back after
    with evaluating(model):
        for index, batch in enumerate(batches):
            if not isinstance(batch, tuple | list) or len(batch) != 3:
                raise ValueError(f"batches[{index}] must be a triple (source, target_in, "
                                 f"target_out), got {type(batch).__name__} of length "
                                 f"{len(batch) if isinstance(batch, tuple | list) else '-'}")
            source, target_in, target_out = batch
            gates = _gates(model, shape).requires_grad_()
            scores = model(source, target_in, gates)
            _check_targets(model, target_in, target_out, f"target_out of batches[{index}]")
            loss = cross_entropy(scores, target_out)
            if not torch.isfinite(loss.detach()):  # as head_importance: never NaN importances
                raise ValueError(f"the loss of model on batches[{index}] is {loss.item()}: head "
                                 f"importance would be NaN; check model's parameters (a NaN or "
                                 f"inf weight) and the batch")
            (grad,) = torch.autograd.grad(loss, gates)
            if not torch.isfinite(grad).all():
                raise ValueError(f"the gradient of model's loss with respect to the gates is not "
                                 f"finite for batches[{index}]: head importance would be NaN")
            total += grad.abs().to(total.dtype)
    return (total / total.norm(dim=-1, keepdim=True).clamp_min(1e-20)).to(gate_dtype)


@torch.no_grad()
def kind_pruning_curves(
    model: TinyTranslator,
    importance: torch.Tensor,
    source: torch.Tensor,
    target_in: torch.Tensor,
    target_out: torch.Tensor,
    *,
    by_part: bool = False,
) -> dict[str, list[float]] | dict[str, dict[str, list[float]]]:
    """For each kind of attention, the accuracy on ``(source, target_in, target_out)`` as its
    heads are removed one by one, least important first, the other kinds left intact.

    Returns ``{kind: [accuracy with 0 heads removed, 1, ..., all]}`` (Michel et al.'s
    experiment of pruning each kind of attention separately), the accuracy over whole target
    tokens (word and inflection bit). With ``by_part=True``, returns
    ``{kind: {"token": [...], "word": [...], "bit": [...]}}``: the token accuracy and, apart,
    how often the word ``T[w_i]`` (the token // 2) and the bit ``b_i`` (the token mod 2) are
    right.

    The model runs in eval mode (no dropout) and gets its submodules' modes back.

    Raises ``ValueError`` naming ``model`` (not a :class:`TinyTranslator`, or scores that hold
    NaN: argmax would count NaN as the largest score and give a believable accuracy),
    ``importance`` (not ``(3, layers, heads)``, or NaN) or ``target_out`` (not the model's
    classes, one per position of ``target_in``).
    """
    _check_curve_inputs(model, importance, target_in, target_out)
    by_part = require_flag("by_part", by_part)  # "no" is a true string (tester 48)

    def accuracies(scores):
        predicted = scores.argmax(-1)
        return {"token": (predicted == target_out).double().mean().item(),
                "word": (predicted // 2 == target_out // 2).double().mean().item(),
                "bit": (predicted % 2 == target_out % 2).double().mean().item()}

    curves = _pruned_by_kind(model, importance, source, target_in, accuracies)
    return curves if by_part else {kind: parts["token"] for kind, parts in curves.items()}


@torch.no_grad()
def agreement_pruning_curves(
    model: TinyTranslator,
    importance: torch.Tensor,
    source: torch.Tensor,
    target_in: torch.Tensor,
    target_out: torch.Tensor,
) -> dict[str, dict[str, list[float]]]:
    """:func:`kind_pruning_curves` for the agreement task: for each kind of attention,
    ``{"token", "word", "sense", "agreement": [accuracy with 0 heads removed, 1, ..., all]}``,
    heads removed least important first, the other kinds intact, counted on the target
    positions ``FREE_POSITIONS .. n-1`` (the earlier agreement bits are free choices).

    The parts of token ``y = 4 word + 2 sense + agreement``: ``y // 4``, ``(y // 2) mod 2``,
    ``y mod 2``; chance is ``1/V``, 1/2 and 1/2.

    Raises ``ValueError`` as :func:`kind_pruning_curves` does."""
    _check_curve_inputs(model, importance, target_in, target_out)
    if target_out.shape[1] <= FREE_POSITIONS:  # the mean of no position is NaN (tester 49)
        raise ValueError(f"target_out must have more than {FREE_POSITIONS} positions (the first "
                         f"{FREE_POSITIONS} agreement bits are free choices, not scored), got "
                         f"{target_out.shape[1]}")
    target = target_out[:, FREE_POSITIONS:]

    def accuracies(scores):
        predicted = scores.argmax(-1)[:, FREE_POSITIONS:]
        return {"token": (predicted == target).double().mean().item(),
                "word": (predicted // 4 == target // 4).double().mean().item(),
                "sense": (predicted // 2 % 2 == target // 2 % 2).double().mean().item(),
                "agreement": (predicted % 2 == target % 2).double().mean().item()}

    return _pruned_by_kind(model, importance, source, target_in, accuracies)


def _check_curve_inputs(model: TinyTranslator, importance: object, target_in: torch.Tensor,
                        target_out: object) -> None:
    require_module("model", model, TinyTranslator)
    require_tensor("importance", importance, "float")
    shape = (len(KINDS), model.num_layers, model.num_heads)
    if tuple(importance.shape) != shape:
        raise ValueError(f"importance must have shape {shape} (kinds, layers, heads), as "
                         f"kind_importance(model, batches) returns, got "
                         f"{tuple(importance.shape)}")
    require_no_nan("importance", importance, "a NaN has no place in a ranking: check the model "
                   "kind_importance read")
    require_tensor("target_in", target_in, "int")  # the model checks ids; shape read here
    _check_targets(model, target_in, target_out)
    if target_out.numel() == 0:  # an accuracy over no position is NaN (tester 49)
        raise ValueError(f"target_out must hold at least one position to score, got shape "
                         f"{tuple(target_out.shape)}")
    for name, tensor in (("importance", importance), ("target_in", target_in),
                         ("target_out", target_out)):
        require_module_device(name, tensor, model, "model")  # else torch stops inside


def _pruned_by_kind(model, importance, source, target_in,
                    accuracies) -> dict[str, dict[str, list[float]]]:
    """``{kind: {part: [accuracies(scores) with 0, 1, ..., all of that kind's heads gated off,
    least important first]}}``, ``scores`` the model's on ``(source, target_in)``.

    Computed once and shared: the point with every head present (the first point of every
    curve: the same gates), and the encoder's output with all its heads, which every point of
    the two decoder kinds reads (their gates leave the encoder's open). The same operations
    on the same inputs, so the curves are those of a whole forward pass per point, bit for bit
    (tests/test_seq2seq.py compares them)."""
    # every point in eval mode (no dropout), the modes put back after
    with evaluating(model):
        return _pruned_curves(model, importance, source, target_in, accuracies)


def _pruned_curves(model, importance, source, target_in,
                   accuracies) -> dict[str, dict[str, list[float]]]:
    """:func:`_pruned_by_kind`'s loop, on a model in eval mode."""
    from mha.analysis.pruning_curves import pruning_order

    open_gates = _gates(model, importance.shape)  # the model's dtype, as its head_mask wants
    scores, memory = _scores(model, source, target_in, open_gates)
    all_heads = accuracies(scores)
    curves = {}
    for kind, name in enumerate(KINDS):
        gates = open_gates.clone()
        shared = None if kind == KINDS.index("encoder self-attention") else memory
        points = [all_heads]
        for layer, head in pruning_order(importance[kind]):
            gates[kind, layer, head] = 0.0
            points.append(accuracies(_scores(model, source, target_in, gates, shared)[0]))
        curves[name] = {part: [p[part] for p in points] for part in points[0]}
    return curves
