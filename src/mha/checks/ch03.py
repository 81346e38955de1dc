"""Checks for the exercises of chapter 3 (attention with weights)."""

from __future__ import annotations

import math

import torch

from mha.exercises import Wrong, exercise_check, expect_close, is_instance, seed
from mha.single_head import SelfAttention


@exercise_check("3.1")
def self_attention_from_matrices(answer) -> None:
    """``answer(w_q, w_k, w_v)`` must return an ``mha.SelfAttention`` computing
    ``softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V`` for the seed's ``(d, d_k)`` matrices."""
    g = torch.Generator().manual_seed(seed(31))
    for d, dk, dv in [(5, 3, 4), (4, 4, 4)]:  # a square case too, where a missing .T is silent
        w_q, w_k, w_v = (torch.randn(d, k, generator=g) for k in (dk, dk, dv))
        layer = answer(w_q.clone(), w_k.clone(), w_v.clone())
        if not is_instance(layer, SelfAttention):
            raise Wrong(f"expected an mha.SelfAttention, got {type(layer).__name__}")
        x = torch.randn(2, 6, d, generator=g)
        with torch.no_grad():
            out, _ = layer(x)
        x64 = x.double()
        scores = (x64 @ w_q.double()) @ (x64 @ w_k.double()).transpose(-2, -1) / math.sqrt(dk)
        expected = torch.softmax(scores, dim=-1) @ (x64 @ w_v.double())
        expect_close(f"the output for W_Q of shape ({d}, {dk}), W_V of shape ({d}, {dv})",
                     out, expected)


@exercise_check("3.3")
def best_projection_error(answer) -> None:
    """``answer(x, target)`` must return the least mean squared error of any ``x W + b``."""
    g = torch.Generator().manual_seed(seed(33))
    x = torch.randn(3, 40, 5, generator=g)
    exact_w = torch.randn(5, 2, generator=g)
    for name, target in [("a target that is x W + b plus noise",
                          x @ exact_w + 1.0 + 0.3 * torch.randn(3, 40, 2, generator=g)),
                         ("a target that is no projection of x",
                          torch.randn(3, 40, 2, generator=g))]:
        got = answer(x.clone(), target.clone())
        # reference: normal equations on [x, 1] in float64, through the pseudo-inverse
        rows = torch.cat([x.reshape(-1, 5), torch.ones(120, 1)], dim=1).double()
        flat = target.reshape(-1, 2).double()
        residual = rows @ (torch.linalg.pinv(rows) @ flat) - flat
        expected = residual.square().mean()
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                raise Wrong(f"{name}: expected one number, got shape {tuple(got.shape)}")
            got = got.item()
        if not isinstance(got, float):
            raise Wrong(f"{name}: expected a float, got {type(got).__name__}")
        if not math.isclose(got, expected.item(), rel_tol=1e-3, abs_tol=1e-6):
            raise Wrong(f"{name}: expected {expected.item():.4f}, got {got:.4f}")
