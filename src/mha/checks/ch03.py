"""Checks for the exercises of chapter 3 (attention with weights)."""

from __future__ import annotations

import math

import torch

from mha.exercises import (
    AnswerRaised,
    Wrong,
    exercise_check,
    expect_close,
    finite_number,
    is_instance,
    seed,
)
from mha.layers.single_head import SelfAttention


def _self_attention_case(answer, g: torch.Generator, d: int, dk: int, dv: int,
                         n: int = 6) -> None:
    w_q, w_k, w_v = (torch.randn(d, k, generator=g) for k in (dk, dk, dv))
    x = torch.randn(2, n, d, generator=g)
    # the reference first, from the check's own tensors; the answer gets copies of them
    x64 = x.double()
    scores = (x64 @ w_q.double()) @ (x64 @ w_k.double()).transpose(-2, -1) / math.sqrt(dk)
    expected = torch.softmax(scores, dim=-1) @ (x64 @ w_v.double())
    mistakes = []
    if d == dk == dv:  # nn.Linear keeps W^T: copying W itself goes through silently here
        t_q, t_k, t_v = (w.double().T for w in (w_q, w_k, w_v))
        t_scores = (x64 @ t_q) @ (x64 @ t_k).transpose(-2, -1) / math.sqrt(dk)
        mistakes.append(("the layer multiplies by W^T instead of W: nn.Linear stores its "
                         "weight as (out_features, in_features), so copy W.T into it",
                         torch.softmax(t_scores, dim=-1) @ (x64 @ t_v)))
    try:
        layer = answer(w_q, w_k, w_v)
    except AnswerRaised as raised:
        if raised.name != "RuntimeError" or "size" not in raised.message:
            raise
        raise Wrong(f"your function raised RuntimeError for W_Q and W_K of shape ({d}, {dk}) "
                    f"and W_V of shape ({d}, {dv}): {raised.message} (nn.Linear stores its "
                    f"weight as (out_features, in_features): the transpose of W)") from None
    if not is_instance(layer, SelfAttention):
        raise Wrong(f"expected an mha.SelfAttention, got {type(layer).__name__}")
    try:
        out, _ = layer(x)
    except AnswerRaised as raised:
        raise Wrong(f"your layer raised {raised.name} when called on x of shape "
                    f"{tuple(x.shape)} (W_Q of shape ({d}, {dk}), W_V of shape ({d}, {dv})): "
                    f"{raised.message}") from None
    # tolerance: expect_close's default (atol 1e-5, rtol 1e-4): the layer runs in float32
    # (nn.Linear's default), whose rounding of these sums stays below 1e-5
    expect_close(f"the output for W_Q of shape ({d}, {dk}), W_V of shape ({d}, {dv}), "
                 f"{n} tokens", out, expected, mistakes=mistakes)


@exercise_check("3.1", points=0.5, part="W_Q, W_K of shape (5, 3) or (4, 4)",
                reference_names=("mha.checks.ch03",))  # no mha callable solves it
def self_attention_from_matrices(answer) -> None:
    """``answer(w_q, w_k, w_v)`` must return an ``mha.SelfAttention`` computing
    ``softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V`` for the seed's ``(d, d_k)`` matrices."""
    g = torch.Generator().manual_seed(seed(31))
    for d, dk, dv in [(5, 3, 4), (4, 4, 4)]:  # a square case too, where a missing .T is silent
        _self_attention_case(answer, g, d, dk, dv)


@self_attention_from_matrices.part("d_k = 1 with values wider than the tokens, and n = 1",
                                   points=0.5, hidden=True)
def _narrow_keys(answer) -> None:
    # the edges of the sizes: one query/key feature (the scale is sqrt(1)), d_v > d (an answer
    # that assumes d_v <= d or d_v = d_k fails), and a single token (its weight is 1)
    g = torch.Generator().manual_seed(seed(1031))
    _self_attention_case(answer, g, 3, 1, 6)
    _self_attention_case(answer, g, 4, 2, 3, n=1)


@exercise_check("3.3", reference_names=("mha.checks.ch03",))  # no mha callable solves it
def best_projection_error(answer) -> None:
    """``answer(x, target)`` must return the least mean squared error of any ``x W + b``."""
    g = torch.Generator().manual_seed(seed(33))
    x = torch.randn(3, 40, 5, generator=g)
    exact_w = torch.randn(5, 2, generator=g)
    for name, target in [("a target that is x W + b plus noise",
                          x @ exact_w + 1.0 + 0.3 * torch.randn(3, 40, 2, generator=g)),
                         ("a target that is no projection of x",
                          torch.randn(3, 40, 2, generator=g))]:
        # reference: normal equations on [x, 1] in float64, through the pseudo-inverse
        rows = torch.cat([x.reshape(-1, 5), torch.ones(120, 1)], dim=1).double()
        flat = target.reshape(-1, 2).double()
        residual = rows @ (torch.linalg.pinv(rows) @ flat) - flat
        expected = residual.square().mean().item()
        # the commonest slip: no bias column (a projection x W without + b)
        plain = x.reshape(-1, 5).double()
        no_bias = (plain @ (torch.linalg.pinv(plain) @ flat) - flat).square().mean().item()
        got = answer(x, target)
        got = finite_number(name, got)  # NaN and inf are no error of a fit
        # tolerance: relative 1e-3 (and 1e-6 absolute): a fit in float32, centred data
        # without a bias column, or another solver (lstsq, pinv, QR) all land well within it;
        # the slip it names (no bias) changes the error by far more here
        if not math.isclose(got, expected, rel_tol=1e-3, abs_tol=1e-6):
            if math.isclose(got, no_bias, rel_tol=1e-3, abs_tol=1e-6):
                raise Wrong(f"{name}: your error is that of the best x W without a bias b")
            side = "larger" if got > expected else "smaller"
            hint = (" (no projection can do better than the least-squares one)"
                    if side == "smaller" else " (is it the least-squares fit, with a bias?)")
            raise Wrong(f"{name}: your error {got:.4f} is {side} than the least one{hint}")
