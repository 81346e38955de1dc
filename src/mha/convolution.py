r"""Multi-head self-attention that computes a convolution (Cordonnier, Loukas and Jaggi, 2020).

Pixels are tokens. Each head scores a key pixel only by its offset ``delta = key - query``
from the query pixel, through the *quadratic encoding*

    score_h(delta) = -alpha_h * (||delta||^2 - 2 <Delta_h, delta>)
                   = -alpha_h * ||delta - Delta_h||^2 + alpha_h * ||Delta_h||^2,

so head h attends to a Gaussian blob of width ``~1/sqrt(alpha_h)`` centred on the shift
``Delta_h``; as ``alpha_h`` grows the blob becomes one pixel. With one head per tap of a K x K
kernel and the tap's weights in the value and output projections, the layer is the convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mha._checks import (
    check_allocation,
    require_flag,
    require_float_tensor,
    require_int,
    require_module_dtype,
    require_optional_int,
    require_positive,
    require_same_device,
    require_same_dtype,
)
from mha.multi_head import MultiHeadAttention


def pixel_offsets(height: int, width: int, padding: int = 0) -> torch.Tensor:
    r"""Offsets ``delta = key - query`` between the pixels of an image and of its padded grid.

    Queries are the ``height * width`` pixels in row-major order; keys are the pixels of the
    grid padded by ``padding`` pixels on every side, ``(height + 2p) * (width + 2p)`` of them,
    also row-major. Returns a float tensor of shape ``(n_q, n_k, 2)`` holding (row, column)
    offsets.
    """
    height, width = require_int("height", height), require_int("width", width)
    padding = require_int("padding", padding, minimum=0)
    n_k = (height + 2 * padding) * (width + 2 * padding)
    check_allocation("pixel_offsets", (height * width, n_k, 2), torch.float32,
                     "use a smaller image")
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    query = torch.stack([rows.flatten(), cols.flatten()], dim=-1)
    rows, cols = torch.meshgrid(torch.arange(-padding, height + padding),
                                torch.arange(-padding, width + padding), indexing="ij")
    key = torch.stack([rows.flatten(), cols.flatten()], dim=-1)
    return (key[None, :, :] - query[:, None, :]).float()


def quadratic_encoding(
    height: int,
    width: int,
    centres: torch.Tensor,
    alpha: torch.Tensor,
    padding: int = 0,
) -> torch.Tensor:
    r"""The attention scores of the quadratic relative positional encoding, one map per head.

    ``score[h, q, k] = v_h . r_delta`` with ``v_h = -alpha_h (1, -2 Delta_h1, -2 Delta_h2)`` and
    ``r_delta = (||delta||^2, delta_1, delta_2)``, ``delta = key - query``; that is
    ``-alpha_h ||delta - Delta_h||^2`` plus a constant per head, which softmax ignores.

    Shapes: ``centres`` ``(h, 2)`` (the shifts ``Delta_h`` as (row, column)), ``alpha``
    ``(h,)``; returns ``(h, height * width, (height + 2p) * (width + 2p))``.
    """
    require_float_tensor("centres", centres, min_dim=2)
    require_float_tensor("alpha", alpha)
    require_same_dtype(("centres", centres), ("alpha", alpha))
    require_same_device(("centres", centres), ("alpha", alpha))
    if centres.dim() != 2 or centres.shape[-1] != 2:
        raise ValueError(f"centres must have shape (heads, 2), got {tuple(centres.shape)}")
    if alpha.shape != centres.shape[:1]:
        raise ValueError(
            f"alpha must have shape ({centres.shape[0]},), one width per head, "
            f"got {tuple(alpha.shape)}"
        )
    n_q = require_int("height", height) * require_int("width", width)
    padding = require_int("padding", padding, minimum=0)
    n_k = (height + 2 * padding) * (width + 2 * padding)
    check_allocation("quadratic_encoding", (max(alpha.shape[0], 3), n_q, n_k), centres.dtype,
                     "use a smaller image")
    delta = pixel_offsets(height, width, padding).to(centres)
    r = torch.cat([delta.pow(2).sum(-1, keepdim=True), delta], dim=-1)  # (n_q, n_k, 3)
    v = -alpha[:, None] * torch.cat([torch.ones_like(alpha)[:, None], -2 * centres], dim=-1)
    return torch.einsum("hd,qkd->hqk", v, r)


class GridSelfAttention(nn.Module):
    r"""Multi-head self-attention over the pixels of an image, scored by position only.

    ``y_q = b_O + sum_h W_O,h^T sum_k softmax_k(score_h(k - q)) W_V,h^T x_k`` with the
    quadratic encoding as score (``W_Q = W_K = 0``, as in Cordonnier et al.'s Lemma 2); the
    keys are the image's pixels plus ``padding`` rings of zero pixels around it, so that a
    border pixel can attend to a shift that leaves the image, as a zero-padded convolution does.

    It is the course's :class:`~mha.MultiHeadAttention` with one change: the output
    projection maps to ``out_channels`` instead of back to ``in_channels`` (a convolution may
    change the number of channels; ``MultiHeadAttention``, like PyTorch's, returns as many
    features as its queries have).

    Args:
        in_channels, out_channels: channels C_in of the input and C_out of the output.
        num_heads: h.
        head_dim: d_v per head; default ``min(in_channels, out_channels)``, which is what a
            convolution tap needs (its rank is at most that).
        padding: rings of zero pixels added around the key grid.
        bias: biases in the projections.
        alpha: initial width parameter of every head.

    Parameters ``centres`` ``(h, 2)`` (random start, standard deviation 1) and ``alpha``
    ``(h,)`` are learnable. ``forward(x)``: ``(B, C_in, H, W) -> (B, C_out, H, W)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        padding: int = 0,
        bias: bool = True,
        alpha: float = 1.0,
    ) -> None:
        super().__init__()
        in_channels = require_int("in_channels", in_channels)
        out_channels = require_int("out_channels", out_channels)
        num_heads = require_int("num_heads", num_heads)
        head_dim = require_optional_int("head_dim", head_dim)
        padding = require_int("padding", padding, minimum=0)
        bias = require_flag("bias", bias)
        alpha = require_positive("alpha", alpha)
        head_dim = min(in_channels, out_channels) if head_dim is None else head_dim
        self.in_channels, self.out_channels = in_channels, out_channels
        self.num_heads, self.padding = num_heads, padding
        self.attn = MultiHeadAttention(in_channels, num_heads, head_dim=head_dim, bias=bias)
        # the one change to MultiHeadAttention: the output has out_channels features
        self.attn.out_proj = nn.Linear(num_heads * head_dim, out_channels, bias=bias)
        # scores come from positions only: W_Q = W_K = 0 (and their biases), kept frozen
        for proj in (self.attn.q_proj, self.attn.k_proj):
            for p in proj.parameters():
                nn.init.zeros_(p)
                p.requires_grad_(False)
        self.centres = nn.Parameter(torch.randn(num_heads, 2))
        self.alpha = nn.Parameter(torch.full((num_heads,), float(alpha)))

    @property
    def head_dim(self) -> int:
        return self.attn.head_dim

    def attention_weights(self, height: int, width: int) -> torch.Tensor:
        # quadratic_encoding checks height and width
        """Each head's attention ``(h, H * W, (H + 2p) * (W + 2p))``; it does not depend on x."""
        scores = quadratic_encoding(height, width, self.centres, self.alpha, self.padding)
        return torch.softmax(scores, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float_tensor("x", x)
        if x.dim() != 4 or x.shape[1] != self.in_channels or 0 in x.shape[2:]:
            raise ValueError(
                f"x must have shape (batch, {self.in_channels}, height, width) with height, "
                f"width >= 1, got {tuple(x.shape)}"
            )
        require_module_dtype("x", x, self)
        batch, _, height, width = x.shape
        p = self.padding
        queries = x.flatten(2).transpose(1, 2)  # (B, H*W, C_in)
        keys = F.pad(x, (p, p, p, p)).flatten(2).transpose(1, 2)  # (B, (H+2p)(W+2p), C_in)
        scores = quadratic_encoding(height, width, self.centres, self.alpha, p)
        # a float mask is added to the (here all-zero) content scores: the positional scores
        out, _ = self.attn(queries, keys, keys, mask=scores[None], need_weights=False)
        return out.transpose(1, 2).reshape(batch, self.out_channels, height, width)


#: the largest ``alpha`` conv_to_attention accepts
MAX_ALPHA = 1e4


def conv_to_attention(conv: nn.Conv2d, alpha: float = 50.0) -> GridSelfAttention:
    r"""A multi-head self-attention layer that computes ``conv`` (Cordonnier et al., Theorem 1).

    A K x K kernel gives ``h = K^2`` heads; head ``h = u K + v`` attends to the shift
    ``Delta_h = (u - K//2, v - K//2)`` with width ``alpha`` and applies the tap
    ``W_h = conv.weight[:, :, u, v]`` (``C_out x C_in``) through its value and output
    projections: with ``V_h`` the head's block of ``v_proj.weight`` (``d_v x C_in``) and ``O_h``
    its block of ``out_proj.weight`` (``C_out x d_v``), ``O_h @ V_h = W_h``. The head dimension
    is ``d_v = min(C_in, C_out)``: ``V_h = W_h, O_h = I`` when ``C_out <= C_in``, else
    ``V_h = I, O_h = W_h``. The conv's bias is the output bias. Then
    ``layer(x) = conv(x) + err`` with, for every output entry,

        |err| <= eps(alpha) * sum_h range_h,   eps(alpha) = 4 e^-alpha / (1 - e^-alpha)^2,

    ``range_h`` the largest spread ``max_k - min_k`` of a channel of ``W_h x_k`` over the
    padded grid: at ``alpha = 50`` the error is below float64 rounding.

    Covers ``nn.Conv2d`` with an odd square kernel, stride 1, dilation 1, groups 1 and "same"
    zero padding (``padding=K//2`` or ``"same"``), with or without bias; anything else
    (a subclass of ``nn.Conv2d`` too) raises ``ValueError``. ``alpha`` is a number in
    ``(0, MAX_ALPHA]``. The result maps ``(B, C_in, H, W)`` to ``(B, C_out, H, W)``.
    """
    if type(conv) is not nn.Conv2d:
        # a subclass (LazyConv2d, a parametrized or custom conv) may compute something else
        raise ValueError(f"conv must be a plain nn.Conv2d (not a subclass, not parametrized), "
                         f"got {type(conv).__name__}")
    k_h, k_w = conv.kernel_size
    if k_h != k_w or k_h % 2 == 0:
        raise ValueError(
            f"only odd square kernels are covered, got kernel_size={conv.kernel_size}"
        )
    size, pad = k_h, k_h // 2
    unsupported = [
        ("stride", conv.stride, (1, 1)),
        ("dilation", conv.dilation, (1, 1)),
        ("groups", conv.groups, 1),
        ("padding_mode", conv.padding_mode, "zeros"),
    ]
    for name, got, covered in unsupported:
        if got != covered:
            raise ValueError(f"only {name}={covered!r} is covered, got {name}={got!r}")
    if conv.padding not in ("same", (pad, pad)):
        raise ValueError(
            f"only 'same' zero padding is covered (padding={pad} for a {size}x{size} kernel), "
            f"got padding={conv.padding!r}"
        )
    alpha = require_positive("alpha", alpha)
    if alpha > MAX_ALPHA:
        raise ValueError(f"alpha must be at most {MAX_ALPHA:g} (eps(alpha) is already 0 in "
                         f"float64 from about 745, and larger widths overflow float32 scores), "
                         f"got {alpha}")

    c_out, c_in = conv.out_channels, conv.in_channels
    heads = size * size
    layer = GridSelfAttention(c_in, c_out, heads, padding=pad, bias=conv.bias is not None)
    weight = conv.weight.detach()
    layer.to(device=weight.device, dtype=weight.dtype)
    taps = weight.permute(2, 3, 0, 1).reshape(heads, c_out, c_in)  # head u*K+v -> tap (u, v)
    d = layer.head_dim
    eye = torch.eye(d, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        u, v = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        layer.centres.copy_(torch.stack([u.flatten(), v.flatten()], dim=-1) - pad)
        layer.alpha.fill_(alpha)
        if c_out <= c_in:  # the value projection applies the tap, the output sums the heads
            layer.attn.v_proj.weight.copy_(taps.reshape(heads * c_out, c_in))
            layer.attn.out_proj.weight.copy_(eye.repeat(1, heads))
        else:  # the value projection copies the pixel, the output applies the tap
            layer.attn.v_proj.weight.copy_(eye.repeat(heads, 1))
            layer.attn.out_proj.weight.copy_(torch.cat(list(taps), dim=1))
        if conv.bias is not None:
            layer.attn.v_proj.bias.zero_()
            layer.attn.out_proj.bias.copy_(conv.bias)
    return layer
