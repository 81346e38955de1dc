"""The checks of chapter 2's exercises accept the reference solutions and reject wrong ones."""

import math

import pytest
import torch

import mha
from mha.checks import ch02
from mha.exercises import set_grading_seed

pytestmark = pytest.mark.chapter(2)  # make chapter CHAPTER=02 runs these


def prefers_other_reference(x):
    dots = x @ x.transpose(-2, -1)
    return dots > dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def previous_token_reference(n, c=None):
    # winning score c^2 / sqrt(n) = ln(10 n): weight 10n / (11n - 1) > 0.9 for every n
    c = math.sqrt(math.sqrt(n) * math.log(10 * n)) if c is None else c
    w_q = c * torch.eye(n, dtype=torch.float64)
    # key j is c e_{j+1}, so query i (c e_i) matches key i - 1 only
    w_k = c * torch.eye(n, dtype=torch.float64).roll(-1, dims=0)
    w_k[-1] = 0.0  # the last token is nobody's previous token
    return w_q, w_k


def test_prefers_other_accepts_the_reference():
    assert ch02.prefers_other(prefers_other_reference).status == "correct"


def test_prefers_other_counts_exact_ties_as_false():
    # integer tokens with x_i . x_j = |x_i|^2 exactly: alpha_ij = alpha_ii, so False
    def ties_as_true(x):
        dots = x @ x.transpose(-2, -1)
        return (dots >= dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)) & ~torch.eye(
            x.shape[-2], dtype=torch.bool)

    assert ch02.prefers_other(ties_as_true).status == "wrong"


def _ctc_gradient(s: torch.Tensor) -> torch.Tensor:
    """e^s from the gradient of CTC's loss (one step, no target: the blank's path) with respect
    to the log-probabilities of the other classes."""
    log_probs = torch.zeros(1, 1, s.numel() + 1, dtype=torch.float64)
    log_probs[0, 0, 1:] = s.flatten()
    log_probs.requires_grad_(True)
    loss = torch.nn.functional.ctc_loss(log_probs, torch.zeros(1, 0, dtype=torch.long),
                                        torch.tensor([1]), torch.tensor([0]), reduction="sum")
    return torch.autograd.grad(loss, log_probs)[0][0, 0, 1:].reshape(s.shape)


def _lstm_sigmoid(s: torch.Tensor) -> torch.Tensor:
    """sigma(s) as nn.LSTM's cell state: input gate = sigma(s), candidate = tanh(20) = 1."""
    cell = torch.nn.LSTM(1, 1)
    with torch.no_grad():
        cell.weight_ih_l0.copy_(torch.tensor([[1.0], [0.0], [0.0], [0.0]]))
        cell.weight_hh_l0.zero_()
        cell.bias_ih_l0.copy_(torch.tensor([0.0, 0.0, 20.0, 0.0]))
        cell.bias_hh_l0.zero_()
    return cell(s.reshape(1, -1, 1).float())[1][1].reshape(s.shape)


@pytest.mark.parametrize("exponential", [
    lambda s: torch.special.gammaincc(torch.ones_like(s), -s.clamp(max=0)),  # e^s for s <= 0
    lambda s: torch.nn.functional.binary_cross_entropy_with_logits(
        s, torch.zeros_like(s), reduction="none"),  # softplus(s)
    lambda s: torch.nn.functional.soft_margin_loss(s, -torch.ones_like(s), reduction="none"),
    lambda s: torch.nn.functional.gelu(s, approximate="tanh"),
    # attack 44: Euler's formula, cos(i s) + sin(i s) / i = e^s, and tan(i s / 2) / i =
    # tanh(s / 2); the gradient of CTC's loss at an unused class is e^(its log-probability)
    lambda s: (torch.cos(1j * s) + torch.sin(1j * s) / 1j).real,
    lambda s: (torch.tan(0.5j * s) / 1j).real,
    lambda s: _ctc_gradient(s),
    # attack 45: nn.LSTM's one CPU kernel computes sigmoid inside (its cell state is sigma(s)
    # with these weights, and sigma(s) / sigma(-s) = e^s); e^s as a range of one
    lambda s: _lstm_sigmoid(s),
    lambda s: torch.stack([torch.logspace(v, v, 1, base=math.e) for v in s.flatten().tolist()]),
], ids=["gammaincc", "bce_with_logits", "soft_margin_loss", "gelu_tanh", "complex_cos_sin",
        "complex_tan", "ctc_loss_gradient", "lstm_kernel", "logspace"])
def test_prefers_other_refuses_exponentials_computed_inside_other_ops(exponential):
    """Attack 43: torch.special.gammaincc(1, t) = e^-t, and softplus or tanh computed inside a
    loss's or gelu's kernel, reached no forbidden op name: their ops are forbidden now."""
    def answer(x):
        dots = x @ x.transpose(-2, -1)
        exponential(dots)
        return dots > dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)

    result = ch02.prefers_other(answer)
    assert result.status == "wrong" and "forbids" in result.message, result.message


# a student's x.T on a batch is one of the wrong answers below: torch's deprecation warning of
# it is expected here, not noise to read in every chapter loop (maintainer 44)
@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors:UserWarning")
def test_prefers_other_rejects_wrong_answers(capsys):
    # comparing with |x_j|^2 instead of |x_i|^2 (the column's diagonal, not the row's)
    def column_diagonal(x):
        dots = x @ x.transpose(-2, -1)
        return dots > dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-2)

    result = ch02.prefers_other(column_diagonal)
    assert result.status == "wrong" and "(i=" in result.message
    assert ch02.prefers_other(lambda x: prefers_other_reference(x).int()).status == "wrong"
    assert ch02.prefers_other(lambda x: prefers_other_reference(x)[..., :-1]).status == "wrong"
    assert ch02.prefers_other(lambda x: 1 / 0).status == "error"

    # written for one sequence: torch's broadcasting error alone did not say why (student 41)
    def one_sequence(x):
        dots = x @ x.T
        return dots > dots.diagonal().unsqueeze(-1)

    result = ch02.prefers_other(one_sequence)
    assert result.status == "wrong"
    assert "for x of shape (2, 5, 16), a batch of 2 sequences, your answer raised " \
        "RuntimeError" in result.message and "x.transpose(-2, -1)" in result.message

    def not_done(x):
        raise NotImplementedError()

    assert ch02.prefers_other(not_done).status == "not done"
    assert "✗ Exercise 2.2" in capsys.readouterr().out


def test_previous_token_projections_accepts_the_reference():
    assert ch02.previous_token_projections(previous_token_reference).status == "correct"


def test_previous_token_projections_rejects_wrong_answers():
    identity = ch02.previous_token_projections(
        lambda n: (torch.eye(n, dtype=torch.float64), torch.eye(n, dtype=torch.float64)))
    assert identity.status == "wrong" and "token 1" in identity.message

    def next_token(n):  # attends to i + 1 instead of i - 1
        w_q, w_k = previous_token_reference(n)
        return w_q, w_k.roll(2, dims=0)

    assert ch02.previous_token_projections(next_token).status == "wrong"

    def too_weak(n):  # the right pattern, too little weight
        w_q, w_k = previous_token_reference(n)
        return w_q / 4, w_k / 4

    assert ch02.previous_token_projections(too_weak).status == "wrong"
    # a fixed c = 4 works for small n only: token weight e^t / (e^t + n - 1), t = 16 / sqrt(n)
    fixed = ch02.previous_token_projections(lambda n: previous_token_reference(n, c=4.0))
    assert fixed.status == "wrong" and "n = 13" in fixed.message
    assert ch02.previous_token_projections(lambda n: torch.eye(n)).status == "wrong"
    shapes = ch02.previous_token_projections(
        lambda n: (torch.eye(n + 1), torch.eye(n + 1)))
    assert shapes.status == "wrong" and "shape" in shapes.message


def failure_rate_reference(sizes, width, spread, violations=mha.diagonal_violations):
    # section 2.4's sampling with another seed than the check's
    g = torch.Generator().manual_seed(5)
    rates = {}
    for n in sizes:
        tokens = torch.randn(2000, n, width, generator=g, dtype=torch.float64)
        z = torch.randn(2000, n, 1, generator=g, dtype=torch.float64)
        _, w = mha.self_attention(torch.exp(spread * z) * tokens)
        rates[n] = violations(w).flatten(-2).any(-1).double().mean().item()
    return rates


def row_max_violations(w):  # the row-wise statement (S2), not the seed's inequality (S1)
    return w > w.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def test_failure_rate_by_tokens_accepts_the_reference():
    assert ch02.failure_rate_by_tokens(failure_rate_reference).status == "correct"
    for grading_seed in (3, 4):
        set_grading_seed(grading_seed)
        try:
            assert ch02.failure_rate_by_tokens(failure_rate_reference).status == "correct"
        finally:
            set_grading_seed(None)


def test_failure_rate_by_tokens_asks_the_exercises_question_first():
    asked = []

    def recorder(sizes, width, spread):
        asked.append((sizes, width, spread))
        return failure_rate_reference(sizes, width, spread)

    ch02.failure_rate_by_tokens(recorder)
    assert asked[0] == ((2, 3, 4, 8, 16, 32), 2, 0.0) and len(asked) == 2


def test_failure_rate_by_tokens_rejects_wrong_answers():
    s2 = ch02.failure_rate_by_tokens(
        lambda *a: failure_rate_reference(*a, violations=row_max_violations))
    assert s2.status == "wrong"
    assert ch02.failure_rate_by_tokens(
        lambda *a: {**failure_rate_reference(*a), 2: 0.2}).status == "wrong"
    assert ch02.failure_rate_by_tokens(
        lambda *a: {**failure_rate_reference(*a), 8: 1.5}).status == "wrong"
    # C and sigma ignored: right on the exercise's question, wrong on the check's own setting
    ignored = ch02.failure_rate_by_tokens(lambda sizes, width, spread:
                                          failure_rate_reference(sizes, 2, 0.0))
    assert ignored.status == "wrong" and "C=" in ignored.message
    missing = ch02.failure_rate_by_tokens(
        lambda *a: {n: r for n, r in failure_rate_reference(*a).items() if n != 32})
    assert missing.status == "wrong"
    as_list = ch02.failure_rate_by_tokens(lambda *a: list(failure_rate_reference(*a).values()))
    assert as_list.status == "wrong" and "dict" in as_list.message
