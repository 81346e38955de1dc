"""Checks for the exercises of chapter 5 (attention and convolution)."""

from __future__ import annotations

import torch
from torch import nn

from mha.analysis.convolution import conv_to_attention
from mha.exercises import Built, Wrong, build, exercise_check, expect_close, seed


@exercise_check("5.2", points=0.75, part="offsets of shapes (2,), (5, 2) and (3, 4, 2)",
                reference_names=("mha.quadratic_encoding", "mha.relative_scores",
                                 "mha.convolution.quadratic_encoding",
                                 "mha.convolution.relative_scores"))
def quadratic_scores(answer) -> None:
    """``answer(delta, centre, alpha)``: the quadratic encoding's score of offsets ``delta``."""
    g = torch.Generator().manual_seed(seed(52))
    for shape in [(2,), (5, 2), (3, 4, 2)]:
        _scores_case(answer, g, shape)


@quadratic_scores.part("offsets with dimensions of size one, (1, 1, 2), and none, (0, 2)",
                       points=0.25, hidden=True)
def _size_one_and_empty(answer) -> None:
    # the batch dimensions come back as they are: .squeeze() turns (1, 1) into (), and an
    # answer that flattens or loops over the offsets has nothing to stack for (0, 2)
    g = torch.Generator().manual_seed(seed(1052))
    for shape in [(1, 1, 2), (0, 2)]:
        _scores_case(answer, g, shape)


def _scores_case(answer, g: torch.Generator, shape: tuple[int, ...]) -> None:
    delta = torch.randint(-3, 4, shape, generator=g).double()
    centre = torch.randn(2, generator=g, dtype=torch.float64)
    alpha = 0.5 + torch.rand(1, generator=g).item() * 3
    # reference by completing the square: -alpha ||delta - centre||^2 + alpha ||centre||^2
    expected = -alpha * (delta - centre).pow(2).sum(-1) + alpha * centre.pow(2).sum()
    got = answer(delta, centre, alpha)
    # tolerance: 1e-5 (absolute and relative). The inputs are float64; an answer that
    # computes in float32 rounds scores of size ~50 by ~1e-6, and every slip (a sign, a
    # factor 2, the constant term) moves them by far more
    expect_close(f"quadratic_scores for delta of shape {shape}, alpha={alpha:.3f}",
                 got, expected, atol=1e-5, rtol=1e-5)


def _kernel_case(answer, g: torch.Generator, c_in: int, c_out: int, size: int) -> None:
    weight = torch.randn(c_out, c_in, size, size, generator=g, dtype=torch.float64)
    value, output = _mixed_projections(_grid_layer(weight), g)
    layer = build(answer, Built(grid_layer_from_projections, c_in, c_out, size, value, output))
    got = answer(layer)
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"expected a torch.Tensor, got {type(got).__name__}")
    # tolerance: 1e-6 (absolute and relative). The layer is float64 and the kernel is a sum
    # of products of its two projections, exact to ~1e-15 in any order; 1e-6 also admits a
    # float32 product, and a transposed or misplaced tap differs by order 1
    expect_close(f"the kernel of conv_to_attention(nn.Conv2d({c_in}, {c_out}, {size}))",
                 got, weight, atol=1e-6, rtol=1e-6, mistakes=[
                     ("your kernel is transposed in its two spatial dimensions: head h "
                      "handles the tap [:, :, h // K, h % K]", weight.transpose(2, 3))])


@exercise_check("5.3", points=0.5, part="3 x 3 and 5 x 5 kernels",
                reference_names=("mha.conv_to_attention", "mha.convolution.conv_to_attention"))
def kernel_from_attention(answer) -> None:
    """``answer(layer)``: the conv kernel ``(C_out, C_in, K, K)`` a grid layer computes.

    The kernel stays in the check's process. The answer's side gets only what the layer is made
    of, the two projections, and those with each head's tap split between them by a random
    invertible matrix (``O_h M_h^-1`` and ``M_h V_h``): neither holds the tap as it is, and
    only their product, which is the exercise, gives it back.
    """
    g = torch.Generator().manual_seed(seed(53))
    for c_in, c_out, size in [(1, 2, 3), (3, 2, 3), (2, 4, 5)]:
        _kernel_case(answer, g, c_in, c_out, size)


@kernel_from_attention.part("a 1 x 1 kernel (one head), one output channel", points=0.5,
                            hidden=True)
def _one_head(answer) -> None:
    # K = 1: a single head and a (C_out, C_in, 1, 1) kernel, which .squeeze() breaks
    g = torch.Generator().manual_seed(seed(1053))
    _kernel_case(answer, g, 2, 1, 1)
    _kernel_case(answer, g, 1, 1, 1)


def _grid_layer(weight: torch.Tensor) -> nn.Module:
    """``conv_to_attention`` of a float64 ``nn.Conv2d`` (no bias) whose kernel is ``weight``."""
    c_out, c_in, size, _ = weight.shape
    conv = nn.Conv2d(c_in, c_out, size, padding=size // 2, bias=False).double()
    with torch.no_grad():
        conv.weight.copy_(weight)
    return conv_to_attention(conv)


def _mixed_projections(layer: nn.Module, g: torch.Generator):
    """The layer's value and output projections, each head's tap split by a random matrix."""
    h, d = layer.num_heads, layer.head_dim
    value = layer.attn.v_proj.weight.detach().reshape(h, d, layer.in_channels)
    output = layer.attn.out_proj.weight.detach().reshape(layer.out_channels, h, d)
    # M_h = Q_h diag(s_h): orthogonal times scales in [0.5, 2], so well conditioned
    q, _ = torch.linalg.qr(torch.randn(h, d, d, generator=g, dtype=torch.float64))
    scales = 2.0 ** (2 * torch.rand(h, 1, d, generator=g, dtype=torch.float64) - 1)
    mix = q * scales
    value = (mix @ value).reshape(h * d, layer.in_channels)
    output = torch.einsum("ohd,hde->ohe", output, torch.linalg.inv(mix)).reshape(
        layer.out_channels, h * d)
    return value, output


def grid_layer_from_projections(c_in: int, c_out: int, size: int, value: torch.Tensor,
                                output: torch.Tensor) -> nn.Module:
    """Made on the answer's side: a grid layer for a ``size x size`` conv with these projections.

    ``conv_to_attention`` of a conv of the right shape gives the heads' positions and widths;
    its kernel (zero) is then replaced by ``value`` and ``output``.
    """
    conv = nn.Conv2d(c_in, c_out, size, padding=size // 2, bias=False).double()
    with torch.no_grad():
        conv.weight.zero_()
        layer = conv_to_attention(conv)
        layer.attn.v_proj.weight.copy_(value)
        layer.attn.out_proj.weight.copy_(output)
    return layer
