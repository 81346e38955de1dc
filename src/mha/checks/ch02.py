"""Checks for the exercises of chapter 2 (self-attention's diagonal)."""

from __future__ import annotations

import torch

from mha.analysis.diagonal import diagonal_violations
from mha.checks.ch01 import SOFTMAX_OPS
from mha.exercises import AnswerRaised, Wrong, exercise_check, finite_number, seed, within
from mha.layers.attention import attention, self_attention

# "without a softmax or an exponential": torch's softmaxes, and every op of torch that computes
# an exponential of its input (e^s, 2^s, e^s - 1, log-sum-exp, the sigmoid, the hyperbolic
# functions, the activations made of e^s, ldexp's 2^e, the special functions scaled by an
# exponential: erfcx(x) = e^(x^2) erfc(x), i0e, i1e, the scaled Bessel k0 and k1, whose ratio
# to the unscaled one is an exponential: review 41a) or a power whose exponent is a tensor
# (math.e ** s, torch.pow(2, s), float_power; pow.Tensor_Scalar, s ** 2, stays allowed). An
# honest comparison of dot products needs none of them (tests/test_checks_variants.py).
EXPONENTIAL_OPS = (*SOFTMAX_OPS, "exp", "exp2", "expm1", "expit", "logsumexp", "logcumsumexp",
                   "logaddexp", "logaddexp2", "sigmoid", "tanh", "sinh", "cosh", "elu", "celu",
                   "silu", "mish", "softplus", "glu", "ldexp", "erfcx", "i0e", "i1e",
                   "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
                   # e^-t as a special function (gammaincc(1, t)), softplus inside a loss's
                   # kernel, tanh inside gelu's (attack 43)
                   "igamma", "igammac", "binary_cross_entropy_with_logits", "soft_margin_loss",
                   "gelu",
                   # complex numbers (cos(i s) + sin(i s) / i = e^s), and the gradient of CTC's
                   # loss, an exponential of the log-probabilities (attack 44)
                   "complex", "ctc_loss",
                   # sigmoid and tanh inside one kernel of a recurrent layer (nn.LSTM on the
                   # CPU: mkldnn_rnn_layer), and e^x as a range (logspace): attack 45
                   "rnn", "lstm", "gru", "logspace",
                   "pow.Scalar", "pow.Scalar_out", "pow.Tensor_Tensor", "pow.Tensor_Tensor_out",
                   "pow_.Tensor", "float_power.Scalar", "float_power.Scalar_out",
                   "float_power.Tensor_Tensor", "float_power.Tensor_Tensor_out",
                   "float_power_.Tensor")


def _cases_for_prefers_other() -> list[tuple[torch.Tensor, bool]]:
    """Inputs of several shapes: collinear tokens, integer-valued tokens, uneven norms; each with
    True where every dot product is exact in floating point (ties are exact ties there)."""
    g = torch.Generator().manual_seed(seed(2002))
    # tokens on one line: distinct multiples of one direction, in a hidden-seed order
    n = int(torch.randint(3, 6, (), generator=g))
    collinear = (torch.randperm(6, generator=g)[:n] + 1).double()[:, None]
    # C = 16: scaling the tokens by C^(-1/4) = 1/2 or the dot products by C^(-1/2) = 1/4 is
    # exact, so an answer that scales first keeps the exact ties of these integer tokens
    integers = torch.randint(-3, 4, (2, 5, 16), generator=g).double()
    # an exact tie, alpha_01 = alpha_00: x_1 = x_0 + w with w orthogonal to x_0
    integers[0, 0, :3] = torch.tensor([1.0, 2.0, 0.0]) + torch.randint(0, 3, (3,), generator=g)
    a, b = integers[0, 0, :2].tolist()
    integers[0, 1] = integers[0, 0]
    integers[0, 1, :2] += torch.tensor([b, -a])
    uneven = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    uneven = uneven * torch.exp(torch.randn(4, 6, 1, generator=g, dtype=torch.float64))
    return [(collinear, True), (integers, True), (uneven, False)]


def _prefers_other_cases(answer, cases: list[tuple[torch.Tensor, bool]], first: int = 1) -> None:
    for case, (x, exact) in enumerate(cases, start=first):
        # The reference compares the softmax weights themselves, not the lemma's shortcut. It
        # computes the scores as (x x^T) / sqrt(C), so that equal dot products (exact for the
        # integer tokens) give bit-equal scores and weights: a tie is a tie, not rounding.
        scores = x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5  # (..., n, n)
        weights = torch.softmax(scores, dim=-1)
        diagonal = weights.diagonal(dim1=-2, dim2=-1)
        expected = weights > diagonal.unsqueeze(-1)
        # Tolerance: none where the dot products are exact (integer tokens: a tie must be
        # False). With real-valued tokens an answer's rounding (float32, another order of
        # sums) can flip a near tie: entries whose margin x_i.x_j - |x_i|^2 is within 1e-5 of
        # |x_i| (|x_i| + |x_j|) are not judged (about 1 entry in 10^4 of these draws).
        judged = torch.ones_like(expected)
        if not exact:
            dots = x @ x.transpose(-2, -1)
            norms = dots.diagonal(dim1=-2, dim2=-1).sqrt()
            margin = dots - norms.square().unsqueeze(-1)
            judged = margin.abs() > 1e-5 * norms.unsqueeze(-1) * (norms.unsqueeze(-1)
                                                                   + norms.unsqueeze(-2))
        mistakes = [  # what common slips give, to name them
            ("it compares alpha_ij with alpha_jj (the column's diagonal), not with alpha_ii, "
             "token i's weight on itself", weights > diagonal.unsqueeze(-2)),
            ("it counts ties as preferring: where alpha_ij equals alpha_ii (equal dot "
             "products, as for these integer tokens) token i does not prefer j",
             (weights >= diagonal.unsqueeze(-1))
             & ~torch.eye(x.shape[-2], dtype=torch.bool)),
            ("True and False are swapped", ~expected),
        ]
        try:
            got = answer(x)
        except AnswerRaised as raised:
            # an answer written for one sequence (x.T, dots.diagonal()) raises on a batch, and
            # torch's message does not say why (student 41)
            if x.dim() <= 2 or "builtins.NotImplementedError" in raised.types:
                raise
            raise Wrong(f"case {case}: for x of shape {tuple(x.shape)}, a batch of "
                        f"{x.shape[:-2].numel()} sequences, your answer raised {raised.name}: "
                        f"{raised.message}; x is (..., n, C): transpose with x.transpose(-2, "
                        f"-1) (x.T reverses every dimension) and take diagonals over the last "
                        f"two (dim1=-2, dim2=-1)") from None
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"case {case}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise Wrong(f"case {case}: expected a bool tensor, got dtype {got.dtype}")
        if got.shape != expected.shape:
            raise Wrong(f"case {case}: for x of shape {tuple(x.shape)} expected shape "
                        f"{tuple(expected.shape)}, got {tuple(got.shape)}")
        wrong = ((got != expected) & judged).nonzero()
        if len(wrong):
            what = f"case {case} (x of shape {tuple(x.shape)})"
            for description, mistake in mistakes:
                if torch.equal(got, mistake):
                    raise Wrong(f"{what}: {description}")
            if got.diagonal(dim1=-2, dim2=-1).any():
                raise Wrong(f"{what}: a diagonal entry is True, but alpha_ii > alpha_ii never "
                            f"holds")
            *batch, i, j = wrong[0].tolist()
            where = f"batch index {tuple(batch)}, " if batch else ""
            near = ("" if exact else " (near ties, within 1e-5 relative, are not judged: "
                    "these differ by more than rounding)")
            raise Wrong(f"{what}: {len(wrong)} of {expected.numel()} entries are wrong, the "
                        f"first at {where}(i={i}, j={j}); compare alpha_ij with alpha_ii{near}")


@exercise_check("2.2", points=0.5, part="collinear, integer and real-valued tokens",
                reference_names=("mha.self_attention", "mha.attention.self_attention",
                                 "mha.diagonal_violations", "mha.diagonal.diagonal_violations",
                                 "mha.attention"),
                # "without a softmax or an exponential": the weights are not computed
                forbidden_ops=EXPONENTIAL_OPS)
def prefers_other(answer) -> None:
    """``answer(x)``, ``x`` ``(..., n, C)``, must give bool ``(..., n, n)``: alpha_ij > alpha_ii."""
    _prefers_other_cases(answer, _cases_for_prefers_other())


@prefers_other.part("one token (n = 1), and a zero token among others", points=0.5,
                    hidden=True)
def _single_and_zero_tokens(answer) -> None:
    # n = 1: a (..., 1, 1) result that is False (no other token to prefer; .squeeze() breaks
    # it). A zero token: its row ties everywhere (all False), and nobody prefers it.
    g = torch.Generator().manual_seed(seed(1022))
    single = torch.randn(1, 3, generator=g, dtype=torch.float64)
    batch_of_singles = torch.randn(3, 1, 4, generator=g, dtype=torch.float64)
    with_zero = torch.randint(-3, 4, (5, 16), generator=g).double()
    order = torch.randperm(5, generator=g).tolist()
    with_zero[order[0]] = 0.0
    # and a token twice another: the other one prefers it (so all False is no answer here)
    with_zero[order[1]] = 2 * with_zero[order[2]]
    _prefers_other_cases(answer, [(single, True), (batch_of_singles, True), (with_zero, True)],
                         first=4)


@exercise_check("2.4", reference_names=("mha.checks.ch02",))  # no mha callable solves it
def previous_token_projections(answer) -> None:
    """``answer(n)`` must return ``(w_q, w_k)`` with which one-hot token i attends to i - 1.

    The exercise asks for every ``n >= 2``; the check tries sizes from 2 to 256, and one the hidden
    seed picks. Any pair that works is right, so a message can say which token fails.
    """
    extra = int(torch.randint(4, 200, (), generator=torch.Generator().manual_seed(seed(24))))
    for n in (2, 3, 5, 8, 13, 32, 100, 256, extra):
        result = answer(n)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise Wrong(f"n = {n}: expected a tuple (w_q, w_k), got {type(result).__name__}")
        w_q, w_k = result
        for name, w in (("w_q", w_q), ("w_k", w_k)):
            if not isinstance(w, torch.Tensor) or not w.is_floating_point():
                raise Wrong(f"n = {n}: {name} must be a floating torch.Tensor")
            if w.dim() != 2 or w.shape[0] != n:
                raise Wrong(f"n = {n}: {name} must have shape (n, d_k) = ({n}, d_k), "
                            f"got {tuple(w.shape)}")
        if w_q.shape != w_k.shape:
            raise Wrong(f"n = {n}: w_q and w_k need the same shape, got {tuple(w_q.shape)} "
                        f"and {tuple(w_k.shape)}")
        x = torch.eye(n, dtype=torch.float64)  # one-hot tokens: all of norm 1
        _, weights = attention(x @ w_q.double(), x @ w_k.double(), x)
        for i in range(1, n):
            if not weights[i, i - 1] >= 0.9:
                raise Wrong(f"n = {n}: token {i} puts weight {weights[i, i - 1].item():.4f} "
                            f"on token {i - 1}; it needs at least 0.9")


EXERCISE_SIZES = (2, 3, 4, 8, 16, 32)  # the exercise's question: these n, C = 2, sigma = 0


def _cases_for_failure_rate() -> tuple[list[tuple[tuple[int, ...], int, float]],
                                       torch.Generator]:
    """The exercise's own question, then sizes, width and spread that the hidden seed picks.

    The rates are population values of (n, C, sigma): with fixed inputs a table of them, shared
    or found by trial from feedback, would score under every seed. The second case draws n, C
    and sigma (to two decimals), so a table would have to hold thousands of rates, each one
    as much work as the exercise.
    """
    g = torch.Generator().manual_seed(seed(23))
    small, large = int(torch.randint(3, 8, (), generator=g)), int(torch.randint(9, 25, (),
                                                                               generator=g))
    # never the question's C = 2 and sigma = 0, so that an answer ignoring them fails here
    width = (1, 3, 4)[int(torch.randint(0, 3, (), generator=g))]
    spread = round(0.2 + 0.8 * float(torch.rand((), generator=g, dtype=torch.float64)), 2)
    return [(EXERCISE_SIZES, 2, 0.0), ((2, small, large), width, spread)], g


# no mha callable solves 2.3: the prompt lets the answer use the chapter's failure_rates, which
# calls mha.self_attention and mha.diagonal_violations, so those are tools here, not references
@exercise_check("2.3", reference_names=("mha.checks.ch02",))
def failure_rate_by_tokens(answer) -> None:
    """``answer(sizes, C, spread)`` -> ``{n: fraction of token sets breaking (S1)}``.

    The sampling is section 2.4's: 2000 sets of ``n`` tokens ``exp(spread * z) * g`` with ``g``
    standard normal in ``C`` features and ``z`` one standard normal per token. The check draws
    its own 2000 sets, so it allows for sampling noise.
    """
    cases, g = _cases_for_failure_rate()
    expected_rates = []  # every reference first, from the check's own draws
    for sizes, width, spread in cases:
        rates = {}
        for n in sizes:
            tokens = torch.randn(2000, n, width, generator=g, dtype=torch.float64)
            z = torch.randn(2000, n, 1, generator=g, dtype=torch.float64)
            _, weights = self_attention(torch.exp(spread * z) * tokens)
            rates[n] = diagonal_violations(weights).flatten(-2).any(-1).double().mean().item()
        expected_rates.append(rates)
    for (sizes, width, spread), expected_by_n in zip(cases, expected_rates, strict=True):
        what = f"for sizes={sizes}, C={width}, spread={spread}"
        got = answer(sizes, width, spread)
        if not isinstance(got, dict) or sorted(got) != list(sizes):
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            raise Wrong(f"{what}: expected a dict with keys {sizes}, got {keys}")
        for n in sizes:
            value = finite_number(f"{what}, n = {n}", got[n])
            if not 0.0 <= value <= 1.0:
                raise Wrong(f"{what}, n = {n}: a fraction lies in [0, 1], got {value:.4f}")
            # two estimates from 2000 sets each differ by 0.016 at most in standard deviation:
            # allow ~4 of them. The message says higher or lower, never the check's own rate.
            if not within(value, expected_by_n[n], 0.06):
                side = "higher" if value > expected_by_n[n] else "lower"
                raise Wrong(f"{what}, n = {n}: got {value:.4f}, far {side} than the rate in 2000 "
                            f"fresh token sets (more than sampling noise): is the inequality "
                            f"the seed's (S1), with these C and spread?")
