"""Checks for the exercises of chapter 5 (attention and convolution)."""

from __future__ import annotations

import torch
from torch import nn

from mha.convolution import conv_to_attention
from mha.exercises import Built, Wrong, build, exercise_check, expect_close, seed


@exercise_check("5.2")
def quadratic_scores(answer) -> None:
    """``answer(delta, centre, alpha)``: the quadratic encoding's score of offsets ``delta``."""
    g = torch.Generator().manual_seed(seed(52))
    for shape in [(2,), (5, 2), (3, 4, 2)]:
        delta = torch.randint(-3, 4, shape, generator=g).double()
        centre = torch.randn(2, generator=g, dtype=torch.float64)
        alpha = 0.5 + torch.rand(1, generator=g).item() * 3
        # reference by completing the square: -alpha ||delta - centre||^2 + alpha ||centre||^2
        expected = -alpha * (delta - centre).pow(2).sum(-1) + alpha * centre.pow(2).sum()
        got = answer(delta, centre, alpha)
        expect_close(f"quadratic_scores for delta of shape {shape}, alpha={alpha:.3f}",
                     got, expected, atol=1e-9, rtol=1e-9)


@exercise_check("5.3")
def kernel_from_attention(answer) -> None:
    """``answer(layer)``: the conv kernel ``(C_out, C_in, K, K)`` a grid layer computes."""
    g = torch.Generator().manual_seed(seed(53))
    for c_in, c_out, size in [(1, 2, 3), (3, 2, 3), (2, 4, 5), (2, 1, 1)]:
        weight = torch.randn(c_out, c_in, size, size, generator=g, dtype=torch.float64)
        # the layer is made where the answer runs (a sandbox, under grading) from plain data
        layer = build(answer, Built(grid_layer, weight))
        got = answer(layer)
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"expected a torch.Tensor, got {type(got).__name__}")
        expect_close(f"the kernel of conv_to_attention(nn.Conv2d({c_in}, {c_out}, {size}))",
                     got, weight, atol=1e-9, rtol=1e-9)


def grid_layer(weight: torch.Tensor) -> nn.Module:
    """``conv_to_attention`` of a float64 ``nn.Conv2d`` whose kernel is ``weight``."""
    c_out, c_in, size, _ = weight.shape
    conv = nn.Conv2d(c_in, c_out, size, padding=size // 2).double()
    with torch.no_grad():
        conv.weight.copy_(weight)
    return conv_to_attention(conv)
