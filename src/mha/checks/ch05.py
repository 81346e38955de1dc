"""Checks for the exercises of chapter 5 (attention and convolution)."""

from __future__ import annotations

import torch
from torch import nn

from mha.analysis.convolution import conv_to_attention
from mha.exercises import Built, Wrong, build, exercise_check, expect_close, seed


@exercise_check("5.2", reference_names=("mha.quadratic_encoding", "mha.relative_scores",
                                         "mha.convolution.quadratic_encoding",
                                         "mha.convolution.relative_scores"))
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
    """``answer(layer)``: the conv kernel ``(C_out, C_in, K, K)`` a grid layer computes.

    The kernel stays in the check's process. The answer's side gets only what the layer is made
    of, the two projections, and those with each head's tap split between them by a random
    invertible matrix (``O_h M_h^-1`` and ``M_h V_h``): neither holds the tap as it is, and
    only their product, which is the exercise, gives it back.
    """
    g = torch.Generator().manual_seed(seed(53))
    for c_in, c_out, size in [(1, 2, 3), (3, 2, 3), (2, 4, 5), (2, 1, 1)]:
        weight = torch.randn(c_out, c_in, size, size, generator=g, dtype=torch.float64)
        value, output = _mixed_projections(_grid_layer(weight), g)
        layer = build(answer, Built(grid_layer_from_projections, c_in, c_out, size, value,
                                    output))
        got = answer(layer)
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"expected a torch.Tensor, got {type(got).__name__}")
        expect_close(f"the kernel of conv_to_attention(nn.Conv2d({c_in}, {c_out}, {size}))",
                     got, weight, atol=1e-9, rtol=1e-9, mistakes=[
                         ("your kernel is transposed in its two spatial dimensions: head h "
                          "handles the tap [:, :, h // K, h % K]", weight.transpose(2, 3))])


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
