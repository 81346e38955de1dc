"""A toy task that needs positions: copy the previous token. One small model, five encodings.

The task: a sequence of random tokens ``t_0 .. t_{n-1}``; at every position ``i >= 1`` predict
``t_{i-1}``. Content alone cannot say which token came just before: the model has to know where
each token is. The model is one causal attention layer with a residual connection:

``logits = W_out (E + attn(E))`` with ``E`` the token embeddings (plus the position encoding
for ``"sinusoidal"`` and ``"learned"``); ``"rope"`` rotates queries and keys instead and
``"alibi"`` adds linear biases to the scores.

Where a sequence starts is a choice of the data: ``start`` places its tokens at positions
``start .. start + n - 1``, and training can draw a new start for each batch (``max_start``).
Trained on positions 0..15 only, a score fitted to those positions (one that depends on the
positions i and j themselves) and a score that depends on the offset i - j alone fit the data
equally well; only positions outside the trained ones tell them apart. Chapter 6 measures how
the score moves toward one by offset as training covers more positions (through starts,
``start_step`` or length).
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    require_choice,
    require_generator,
    require_gradients,
    require_int,
    require_int_tensor,
    require_nonempty,
    require_positive,
    require_seed,
    require_token_ids,
)
from mha.layers.alibi import alibi_bias
from mha.layers.multi_head import MultiHeadAttention
from mha.layers.positional import sinusoidal_encoding
from mha.layers.rotary import RotaryMultiHeadAttention
from mha.tasks.training_guard import evaluating, put_back_if_raising, require_finite_loss

#: The position encodings the toy model can use.
ENCODINGS = ("none", "sinusoidal", "learned", "rope", "alibi")

#: Target value for positions with no target (position 0 has no previous token).
IGNORE = -100


def previous_token_batch(
    batch: int, length: int, vocab_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens ``(batch, length)`` and their targets ``target[i] = token[i-1]``.

    Both have shape ``(batch, length)``; ``target[0]`` is ``IGNORE``. Tokens are drawn
    uniformly from ``0 .. vocab_size - 1``.

    Both int64. Raises ``ValueError`` naming a size that is not a positive int, or
    ``generator`` (not a ``torch.Generator``: ``None`` too, which would make the batch
    irreproducible); :class:`mha.MemoryBudgetError` when the batch would exceed the memory budget.
    """
    batch, length = require_int("batch", batch), require_int("length", length)
    vocab_size = require_int("vocab_size", vocab_size)
    require_generator("generator", generator, required=True)
    check_allocation("previous_token_batch", (batch, length), torch.int64,
                     f"use a smaller batch ({batch}) or length ({length})")
    tokens = torch.randint(vocab_size, (batch, length), generator=generator)
    targets = torch.full_like(tokens, IGNORE)
    targets[:, 1:] = tokens[:, :-1]
    return tokens, targets


class PositionToyModel(nn.Module):
    """One causal attention layer on token embeddings, with the chosen position encoding.

    Args:
        encoding: one of ``ENCODINGS``.
        vocab_size: number of token ids.
        embed_dim, num_heads: size of the attention layer.
        max_positions: rows of the ``"learned"`` position table (positions it can look up).

    Raises ``ValueError`` naming ``encoding`` (not in ``ENCODINGS``) or a size;
    :class:`mha.MemoryBudgetError` when the tables would exceed the memory budget.
    """

    def __init__(self, encoding: str, vocab_size: int, embed_dim: int = 32, num_heads: int = 4,
                 max_positions: int = 256) -> None:
        super().__init__()
        require_choice("encoding", encoding, ENCODINGS)
        vocab_size, max_positions = require_int("vocab_size", vocab_size), require_int(
            "max_positions", max_positions)
        check_allocation("PositionToyModel's tables", (max(vocab_size, max_positions),
                         require_int("embed_dim", embed_dim)), torch.get_default_dtype(),
                         f"use a smaller vocab_size ({vocab_size}), max_positions "
                         f"({max_positions}) or embed_dim ({embed_dim})")
        self.encoding = encoding
        self.num_heads = num_heads
        self.max_positions = max_positions
        self.embed = nn.Embedding(vocab_size, embed_dim)
        if encoding == "learned":
            self.positions = nn.Embedding(max_positions, embed_dim)
        if encoding == "rope":
            self.attn = RotaryMultiHeadAttention(embed_dim, num_heads)
        else:
            self.attn = MultiHeadAttention(embed_dim, num_heads)
        self.readout = nn.Linear(embed_dim, vocab_size)

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Logits ``(batch, n, vocab_size)`` for token ids ``(batch, n)`` at positions
        ``start .. start + n - 1`` (``"none"`` and ``"alibi"`` do not depend on ``start``).

        ``tokens`` integer ids; the logits are floating, in the module's dtype. Raises
        ``ValueError`` naming ``tokens`` (not integer ``(batch, n)`` ids below ``vocab_size``,
        or past the learned table) or ``start``; :class:`mha.MemoryBudgetError` when the
        sinusoidal rows would exceed the memory budget."""
        start = require_int("start", start, minimum=0)
        require_int_tensor("tokens", tokens)
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (batch, n), got {tuple(tokens.shape)}")
        require_token_ids("tokens", tokens, self.embed.num_embeddings)
        if tokens.shape[1] == 0:
            raise ValueError(f"tokens must hold at least one token, got shape "
                             f"{tuple(tokens.shape)}")
        n = tokens.shape[1]
        x = self.embed(tokens)
        if self.encoding == "sinusoidal":
            check_allocation("PositionToyModel's sinusoidal rows", (start + n, x.shape[-1]),
                             x.dtype, f"use a smaller start ({start})")
            x = x + sinusoidal_encoding(start + n, x.shape[-1], dtype=x.dtype)[start:]
        if self.encoding == "learned":
            if start + n > self.max_positions:
                raise ValueError(f"the learned table has {self.max_positions} positions, "
                                 f"got a sequence of {n} starting at {start}")
            x = x + self.positions.weight[start:start + n]
        if self.encoding == "alibi":
            # (1, heads, n, n): the same biases for every sequence of the batch
            mask = alibi_bias(self.num_heads, n, causal=True, dtype=x.dtype)[None]
        else:
            mask = torch.ones(n, n, dtype=torch.bool).tril()  # causal: True = may attend
        if self.encoding == "rope":
            out, _ = self.attn(x, positions=torch.arange(start, start + n), mask=mask)
        else:
            out, _ = self.attn(x, mask=mask)
        return self.readout(x + out)


def train_position_model(
    encoding: str,
    *,
    length: int = 16,
    vocab_size: int = 16,
    steps: int = 300,
    batch: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
    max_positions: int = 256,
    max_start: int = 0,
    start_step: int = 1,
) -> PositionToyModel:
    """Train a ``PositionToyModel`` with Adam on fresh batches of ``length`` tokens.

    Each batch starts at position 0 (``max_start=0``) or at a start drawn uniformly from
    ``0, start_step, 2 start_step, .. max_start``, the same for the whole batch
    (``start_step=1000, max_start=1000``: starts 0 and 1000 only, a wide span with few
    positions). Everything random (initial weights, batches, starts) is drawn from ``seed``;
    the caller's global RNG is left as it was.

    Raises ``ValueError`` naming ``encoding`` or a bad size, ``steps``, ``lr``, ``seed``,
    ``max_start`` or ``start_step``, ``max_start`` and ``max_positions`` together when a
    ``"learned"`` table is too short for the last start, and ``lr`` when training diverges (a
    NaN or inf loss or parameter, checked by :mod:`mha.tasks.training_guard`);
    :class:`mha.MemoryBudgetError` when the model or a batch would exceed the memory budget.
    """
    require_int("steps", steps)
    length = require_int("length", length)
    max_start = require_int("max_start", max_start, minimum=0)
    start_step = require_int("start_step", start_step)
    max_positions = require_int("max_positions", max_positions)
    last_start = max_start // start_step * start_step
    # checked up front: else the model refuses the first late start in the middle of training
    if encoding == "learned" and last_start + length > max_positions:
        raise ValueError(f"max_start={max_start} and length={length} need positions up to "
                         f"{last_start + length - 1}, but the learned table has "
                         f"max_positions={max_positions}: lower max_start to at most "
                         f"{max_positions - length} or raise max_positions to at least "
                         f"{last_start + length}")
    require_positive("lr", lr)
    require_gradients("train_position_model")  # torch's own error named no cause (tester 50)
    seed = require_seed("seed", seed)
    # the initial weights come from the global RNG seeded with seed, as before, but on a fork
    # of it: the caller's RNG is left as it was (reseeding it changed the caller's later draws)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = PositionToyModel(encoding, vocab_size, max_positions=max_positions)
        generator = torch.Generator().manual_seed(seed)
        optimiser = torch.optim.Adam(model.parameters(), lr=lr)
        loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
        # a diverged run (too large an lr) gave a NaN model and then a plausible accuracy:
        # refuse a non-finite loss at any step and non-finite parameters at the end
        # the caller passed no model: the errors name the one built here
        what = f"the {encoding!r} position model"
        with put_back_if_raising(list(model.parameters()), lr, what):
            for step in range(steps):
                tokens, targets = previous_token_batch(batch, length, vocab_size, generator)
                # no draw when every batch starts at 0: the runs from position 0 stay as they
                # were
                start = int(torch.randint(max_start // start_step + 1, (), generator=generator)
                            ) * start_step if max_start else 0
                loss = loss_fn(model(tokens, start).flatten(0, 1), targets.flatten())
                require_finite_loss(loss, step, lr, "parameters", what)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
    return model.eval()


@torch.no_grad()
def previous_token_accuracy(
    model: PositionToyModel, length: int, *, batch: int = 256, seed: int = 1, start: int = 0
) -> float:
    """Share of the tokens ``1 .. length-1`` of a sequence (placed at positions ``start ..
    start + length - 1``) where the model predicts the previous token.

    The model runs in eval mode and gets its submodules' modes back (as
    :func:`mha.bits_per_byte`).

    Raises ``ValueError`` naming ``model`` (not a ``PositionToyModel``), a size (``length``
    under 2: no scored position) or ``seed`` (not an int >= 0, as
    :func:`train_position_model`); :class:`mha.MemoryBudgetError` when the batch would exceed
    the memory budget."""
    if not isinstance(model, PositionToyModel):
        raise ValueError(f"model must be a PositionToyModel, got {type(model).__name__}")
    # token 0 has no previous token: length 1 scores nothing, and the mean of nothing is NaN
    if require_int("length", length) < 2:
        raise ValueError(f"length must be at least 2, got {length}: token 0 has no previous "
                         f"token, so a sequence of 1 leaves no scored position")
    # manual_seed would say "expected a long, but got float"
    seed = require_seed("seed", seed)
    vocab_size = model.readout.out_features
    generator = torch.Generator().manual_seed(seed)
    tokens, targets = previous_token_batch(batch, length, vocab_size, generator)
    with evaluating(model):  # a model left in training mode would measure with dropout on
        predicted = model(tokens, start).argmax(dim=-1)
    keep = targets != IGNORE
    return (predicted[keep] == targets[keep]).float().mean().item()


@torch.no_grad()
def score_offset_share(
    model: PositionToyModel, queries: list[int] | range, window: int = 16
) -> torch.Tensor:
    r"""How much of each head's position score the offset alone explains: a share per head,
    shape ``(heads,)``, in [0, 1].

    1 for a score by offset alone (:math:`W_Q W_K^\top` built from the rotations ``M_k``); a
    score that also follows the positions themselves gives less, how much less depending on its
    form: :math:`W = \operatorname{diag}(1, 0, \dots)` scores :math:`\sin i \sin j =
    (\cos(i - j) - \cos(i + j))/2`, half by offset, about 1/2; a score by the key's position
    alone, near 0. On the positions a model was trained on, the task makes a head treat each
    trained offset alike, so a score fitted to those positions agrees there with one by offset
    and the share is near 1 whichever the head learned: to tell what a model learned, measure
    it over queries spread far beyond its trained positions.

    For each query position ``i`` in ``queries``, the score of head ``h`` between the mean token
    embedding :math:`\bar e` placed at ``i`` and at each key ``j = i - window + 1 .. i``,

    .. math:: s_h(i, j) = ((\bar e + p_i) W_Q + b_Q)_h \cdot ((\bar e + p_j) W_K + b_K)_h
              / \sqrt{d_h},

    is the mean score over contents when query and key tokens are drawn independently (the
    score is bilinear). At offset 0 the key is the query's own token, not an independent one,
    so there the mean over tokens ``t`` adds, per head, the constant
    :math:`\overline{((e_t - \bar e) W_Q)_h \cdot ((e_t - \bar e) W_K)_h} / \sqrt{d_h}` (the
    cross terms average to 0). Each query's row is centred (softmax ignores a constant per query),
    then the share is ``1 - (spread of s around its mean over queries at the same offset i - j)
    / (spread of s)``, sums of squares over all queries and offsets: the part of the score's
    variance that the offset explains. Computed in float64; only ``"sinusoidal"`` models.

    Raises ``ValueError`` naming the argument for a model of another kind or encoding, a
    ``window`` under 2, empty ``queries``, fewer than two distinct ones or one below
    ``window - 1``, and for a head whose
    centred scores are all 0 (it scores every key of a query alike: no share to speak of);
    :class:`mha.MemoryBudgetError` when the rows would exceed the memory budget.
    """
    if not isinstance(model, PositionToyModel) or model.encoding != "sinusoidal":
        raise ValueError(f"model must be a PositionToyModel with the 'sinusoidal' encoding, got "
                         f"{getattr(model, 'encoding', type(model).__name__)!r}")
    window = require_int("window", window, minimum=2)  # one key: nothing to compare
    queries = [require_int("queries", i, minimum=window - 1)
               for i in require_nonempty("queries", queries)]
    # each offset's mean is taken over the queries: with one distinct query it is that score
    # itself, nothing is left around it, and the share is 1 for any model
    if len(set(queries)) < 2:
        raise ValueError(f"queries must hold at least two distinct positions, got {queries}: "
                         f"with one, each offset has a single score, which the offset "
                         f"'explains' entirely (the share would be 1 for any model)")
    check_allocation("score_offset_share's rows", (len(queries), window, model.embed.embedding_dim),
                     torch.float64, f"use fewer queries ({len(queries)}) or a smaller window")
    attn, heads, dim = model.attn, model.num_heads, model.embed.embedding_dim
    d_h = attn.head_dim
    positions = sinusoidal_encoding(max(queries) + 1, dim, dtype=torch.float64)
    mean_token = model.embed.weight.double().mean(dim=0)  # tokens are drawn uniformly
    keys = torch.tensor(queries)[:, None] - torch.arange(window - 1, -1, -1)  # (queries, window)
    q = nn.functional.linear(mean_token + positions[queries], attn.q_proj.weight.double(),
                             attn.q_proj.bias.double())  # (queries, heads * d_h)
    k = nn.functional.linear(mean_token + positions[keys], attn.k_proj.weight.double(),
                             attn.k_proj.bias.double())  # (queries, window, heads * d_h)
    q = q.view(len(queries), heads, 1, d_h)  # (queries, heads, 1, d_h)
    k = k.view(len(queries), window, heads, d_h).transpose(1, 2)  # (queries, heads, window, d_h)
    scores = (q * k).sum(dim=-1) / d_h**0.5  # (queries, heads, window)
    # offset 0 (the last key) is the query's own token: add the tokens' own-pair term
    spread = model.embed.weight.double() - mean_token  # (tokens, dim)
    q_own = (spread @ attn.q_proj.weight.double().T).view(-1, heads, d_h)  # (tokens, heads, d_h)
    k_own = (spread @ attn.k_proj.weight.double().T).view(-1, heads, d_h)  # (tokens, heads, d_h)
    scores[:, :, -1] += (q_own * k_own).sum(dim=-1).mean(dim=0) / d_h**0.5
    scores = scores - scores.mean(dim=-1, keepdim=True)  # softmax ignores a constant per query
    within = ((scores - scores.mean(dim=0)) ** 2).sum(dim=(0, 2))  # around each offset's mean
    total = (scores**2).sum(dim=(0, 2))
    flat = (total == 0).nonzero().flatten().tolist()
    if flat:
        raise ValueError(f"model: head(s) {flat} score every key of a query alike (no position "
                         "term in their scores): the share is undefined for them")
    return 1 - within / total


def order_blind_accuracy(position: int, vocab_size: int) -> float:
    r"""The best accuracy at ``position`` of any rule that cannot see the order of the tokens.

    A causal layer without positions sees, at position ``i``, its own token and the *set*
    (with repeats) of the tokens before it: it is unchanged when those are shuffled. Given that
    multiset ``M`` of ``i`` tokens drawn uniformly and independently, the previous token is each
    of them with the same probability, so the token ``v`` has probability ``count_M(v) / i``;
    the best guess is the most frequent one, right with probability ``E[max_v count_M(v)] / i``.

    Computed exactly: ``P(max count <= m)`` is the number of sequences of ``i`` tokens in which
    no token appears more than ``m`` times, divided by ``vocab_size^i``. Exact integers cost:
    the work grows like ``position^3 * vocab_size`` on numbers of ``position * log(vocab_size)``
    digits (position 64 with 64 tokens takes seconds, 128 with 256 over a minute); for large
    ones estimate by sampling multisets instead.

    Raises ``ValueError`` naming ``position`` or ``vocab_size`` (positive ints).
    """
    for name, size in [("position", position), ("vocab_size", vocab_size)]:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{name} must be a positive int, got {size!r}")
    expected_max = Fraction(0)
    for m in range(position):  # E[max] = sum over m >= 0 of P(max > m)
        # ways[j]: sequences of length j over the tokens so far, each at most m times
        ways = [1] + [0] * position
        for _ in range(vocab_size):
            ways = [sum(ways[j - c] * comb(j, c) for c in range(min(m, j) + 1))
                    for j in range(position + 1)]
        expected_max += 1 - Fraction(ways[position], vocab_size**position)
    return float(expected_max / position)
