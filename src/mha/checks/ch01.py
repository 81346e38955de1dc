"""Checks for the exercises of chapter 1 (attention recap).

Each check calls the student's function on inputs it makes itself, compares with a reference it
computes another way, and raises ``Wrong`` saying which input failed and how, never the answer.
"""

from __future__ import annotations

import torch

from mha.exercises import Wrong, exercise_check, expect_close
from mha.exercises import seed as hidden_seed
from mha.layers.attention import attention

# "without calling torch.softmax": every torch op that computes a softmax (torch.softmax,
# F.softmax, Tensor.softmax, nn.Softmax, log_softmax, F.scaled_dot_product_attention and
# nn.MultiheadAttention reach one of these names in torch's dispatcher; nn.TransformerEncoderLayer's
# fast path is one op whose softmax runs inside its kernel, unseen: attack 43)
SOFTMAX_OPS = ("softmax", "scaled_dot_product", "multi_head_attention",
               "transformer_encoder_layer")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(hidden_seed(seed))


def _softmax_cases(answer, cases) -> None:
    for what, scores, temperature in cases:
        # The reference first, from the check's own scores: exp of the scores relative to their
        # row maximum, in float64, so that nothing overflows and the digits are exact enough to
        # compare with float32.
        s = scores.double() / temperature
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        expected = (e / e.sum(dim=-1, keepdim=True)).to(scores.dtype)
        mistakes = [] if temperature == 1 else [
            ("the temperature is ignored", torch.softmax(scores.double(), dim=-1)),
            ("the scores are multiplied by the temperature; divide them by it",
             torch.softmax(scores.double() * temperature, dim=-1))]
        # normalised over another dimension (dim=0 or the columns): no hint before (student 41)
        mistakes += [(f"your weights are normalised over dimension {dim}, not the last: each "
                      f"row (dim=-1, one query's scores) must sum to 1",
                      torch.softmax(s, dim=dim)) for dim in sorted({0, scores.dim() - 2})
                     if scores.dim() > 1]
        got = answer(scores, temperature)
        if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
            raise Wrong(f"for {what}: your answer contains inf or nan "
                        f"(does exp overflow or underflow?)")
        # tolerance: atol 1e-5, rtol 1e-4 (expect_close's default). Weights lie in [0, 1];
        # float32 rounds them to ~1e-7, and dividing by T before or after subtracting the
        # maximum, or log-sum-exp, moves them by a few 1e-7 at T = 0.001 (scores / T of 1e3)
        expect_close(f"for {what}", got, expected, mistakes=mistakes)


@exercise_check("1.2", points=0.5, part="random scores at temperatures 0.25 to 10",
                reference_names=("mha.attention", "mha.attention.attention",
                                 "mha.attention.attend"),
                forbidden_ops=SOFTMAX_OPS)
def stable_softmax(answer) -> None:
    """Exercise 1.2: ``stable_softmax(scores, temperature)`` over the last dimension."""
    g = _generator(12)
    _softmax_cases(answer, [
        ("random scores of shape (4, 7), temperature 1", torch.randn(4, 7, generator=g), 1.0),
        ("random scores of shape (2, 3, 5), temperature 0.25",
         torch.randn(2, 3, 5, generator=g), 0.25),
        ("random scores of shape (3, 6), temperature 10",
         torch.randn(3, 6, generator=g), 10.0)])


@stable_softmax.part("scores near +-1000 and temperature 0.001 (where exp overflows)",
                     points=0.5)
def _no_overflow(answer) -> None:
    g = _generator(1012)

    def steps(low: int, high: int, count: int) -> list[float]:
        # hidden-seed gaps between scores: exact in float32 next to +-1000
        return torch.randint(low, high, (count,), generator=g).double().tolist()

    big = 1000.0 + torch.tensor([0.0, *steps(-3, 0, 2)]).cumsum(0)
    small = -1000.0 - torch.tensor([0.0, *steps(1, 3, 2)]).cumsum(0)
    sharp = torch.tensor(steps(-3, 4, 3))
    _softmax_cases(answer, [
        (f"scores {_ints(big)} (float32), temperature 1", big[None].float(), 1.0),
        (f"scores {_ints(small)} (float32), temperature 1", small[None].float(), 1.0),
        (f"scores {_ints(sharp)} (float32), temperature 0.001", sharp[None].float(), 0.001)])


def _ints(row: torch.Tensor) -> str:
    return "[[" + ", ".join(f"{x:.0f}" for x in row.tolist()) + "]]"


def _check_padding_masks(answer, cases) -> None:
    """Exact comparison: a mask is bools, there is nothing to round."""
    for lengths, n in cases:
        got = answer(torch.tensor(lengths), n)
        what = f"for lengths={lengths}, n={n}"
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise Wrong(f"{what}: expected a bool tensor (True = may attend), got {got.dtype}")
        if got.shape != (len(lengths), n, n):
            raise Wrong(f"{what}: expected shape {(len(lengths), n, n)}, "
                        f"got {tuple(got.shape)}")
        for b, length in enumerate(lengths):
            for i in range(n):
                for j in range(n):
                    allowed = j <= i and j < length
                    if bool(got[b, i, j]) != allowed:
                        reason = ("a key after the query" if j > i else
                                  "a padding key" if j >= length else "a real, earlier key")
                        raise Wrong(f"{what}: entry [{b}, {i}, {j}] is wrong: it pairs query "
                                    f"{i} with {reason}")


@exercise_check("1.3", points=0.5, part="batches of padded sequences",
                reference_names=("mha.attention.causal_mask", "mha.attention.combine_masks"))
def causal_padding_mask(answer) -> None:
    """Exercise 1.3: ``causal_padding_mask(lengths, n)``: bool ``(B, n, n)``, True = may attend."""
    g = _generator(13)
    cases = [([3], 3)]  # one sequence without padding, then batches drawn from the hidden seed
    for batch in (2, 3, 2):
        n = int(torch.randint(4, 8, (), generator=g))
        cases.append((torch.randint(1, n + 1, (batch,), generator=g).tolist(), n))
    cases[-1][0][0] = cases[-1][1]  # a batch in which one sequence fills all n positions
    _check_padding_masks(answer, cases)


@causal_padding_mask.part("n = 1, and sequences all shorter than n", points=0.5, hidden=True)
def _short_sequences(answer) -> None:
    # the edges: a single position (a (1, 1, 1) mask, which .squeeze() breaks), and a batch
    # whose longest sequence is shorter than n (n must come from the argument, not lengths)
    g = _generator(1013)
    n = int(torch.randint(5, 9, (), generator=g))
    # one sequence of 2 or more tokens whatever the seed: with all of length 1 a mask without
    # its causal part passed, for 6.8 % of the grading seeds (instructor 46)
    lengths = [1, int(torch.randint(2, n - 1, (), generator=g)),
               int(torch.randint(1, n - 1, (), generator=g))]
    _check_padding_masks(answer, [([1], 1), (lengths, n)])


@exercise_check("1.5", reference_names=("mha.checks.ch01",))  # no mha callable solves it
def nearest_key_features(answer) -> None:
    """Exercise 1.5: features that make dot-product attention pick the nearest key."""

    def same(a, b):
        return a.shape == b.shape and torch.allclose(a.double(), b.double())

    g = _generator(15)
    for trial in range(20):
        n_k = 2 + trial % 7
        q = torch.rand(3, 1, generator=g, dtype=torch.float64) * 4 - 2
        k = torch.rand(n_k, 1, generator=g, dtype=torch.float64) * 4 - 2
        nearest = (q - k.T).abs().argmin(dim=-1)  # the reference, before the answer runs
        got = answer(q, k)
        if not (isinstance(got, tuple) and len(got) == 2
                and all(isinstance(t, torch.Tensor) for t in got)):
            raise Wrong("expected a pair (query_features, key_features) of tensors")
        q_feat, k_feat = got
        if q_feat.shape[:-1] != (3,) or k_feat.shape[:-1] != (n_k,) or q_feat.dim() != 2:
            raise Wrong(f"for q of shape {tuple(q.shape)} and k of shape {tuple(k.shape)}: "
                        f"expected features of shapes (3, f) and ({n_k}, f), got "
                        f"{tuple(q_feat.shape)} and {tuple(k_feat.shape)}")
        if q_feat.shape[-1] != k_feat.shape[-1]:
            raise Wrong(f"query features have {q_feat.shape[-1]} entries but key features "
                        f"{k_feat.shape[-1]}: a dot product needs the same number")
        _, weights = attention(q_feat.double(), k_feat.double(), k.double())
        chosen = weights.argmax(dim=-1)
        for i in range(3):
            if chosen[i] != nearest[i]:
                keys = ", ".join(f"{x:.3f}" for x in k[:, 0].tolist())
                raise Wrong(f"for the query {q[i, 0]:.3f} and the keys [{keys}], the largest "
                            f"weight falls on {k[chosen[i], 0]:.3f}, but the nearest key is "
                            f"{k[nearest[i], 0]:.3f}")
        # Each token's features must be its own: reverse the keys and draw new queries (of
        # another count); a key's row of features, and a query's, must come back unchanged.
        q_new = torch.rand(4, 1, generator=g, dtype=torch.float64) * 4 - 2
        _, k_rev_feat = answer(q_new, k.flip(0))
        q_rev_feat, _ = answer(q.flip(0), q_new)
        if not (same(k_rev_feat, k_feat.flip(0)) and same(q_rev_feat, q_feat.flip(0))):
            raise Wrong("the features of a token changed when the other tokens changed: row j "
                        "of key_features may depend on k_j only, row i of query_features on "
                        "q_i only")


@exercise_check("1.6", reference_names=("mha.checks.ch01",))  # no mha callable solves it
def entropy_curve(answer) -> None:
    """Exercise 1.6: mean entropy of ``softmax(scores / T)`` for each temperature T."""
    g = _generator(16)
    scores = torch.randn(5, 8, generator=g, dtype=torch.float64) * 3
    temperatures = [0.01, 0.1, 1.0, 10.0, 100.0]
    # The reference sums p log p with p computed in float64, one temperature at a time.
    expected = []
    for temperature in temperatures:
        p = torch.softmax(scores / temperature, dim=-1)
        plogp = torch.where(p > 0, p * p.log(), torch.zeros_like(p))
        expected.append(-plogp.sum(dim=-1).mean())
    got = answer(scores, temperatures)
    expect_close(f"for scores of shape (5, 8) and temperatures {temperatures}",
                 got, torch.stack(expected))
