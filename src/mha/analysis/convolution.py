r"""Multi-head self-attention that computes a convolution (Cordonnier, Loukas and Jaggi, 2020).

Pixels are tokens. Cordonnier et al. score key pixel ``k`` for query pixel ``q`` with a relative
positional encoding ``r_delta`` of the offset ``delta = k - q`` (their eq. (8), after Dai et al.
2019), per head:

    A(q, k) = x_q W_qry W_key^T x_k^T      content - content
            + x_q W_qry W^_key^T r_delta   content - position (where the query looks)
            + u W_key^T x_k^T              content of the key alone
            + v W^_key^T r_delta           position alone

(:func:`relative_scores`). A convolution needs the last term only, with the *quadratic
encoding* ``r_delta = (||delta||^2, delta_1, delta_2)``, ``W^_key = I`` and
``v_h = -alpha_h (1, -2 Delta_h)`` (their eq. (9)):

    score_h(delta) = -alpha_h * (||delta||^2 - 2 <Delta_h, delta>)
                   = -alpha_h * ||delta - Delta_h||^2 + alpha_h * ||Delta_h||^2,

so head h attends to a Gaussian blob of width ``~1/sqrt(alpha_h)`` centred on the shift
``Delta_h``; as ``alpha_h`` grows the blob becomes one pixel. With one head per tap of a K x K
kernel and the tap's weights in the value and output projections, the layer is the convolution
(:func:`conv_to_attention`). The content terms are what a convolution cannot do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    require_flag,
    require_float_tensor,
    require_int,
    require_module_dtype,
    require_optional_int,
    require_positive,
    require_same_device,
    require_same_dtype,
)
from mha.diagrams import COURSE, Diagram
from mha.layers.multi_head import MultiHeadAttention


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


def quadratic_offsets(height: int, width: int, padding: int = 0) -> torch.Tensor:
    r"""The quadratic relative encoding ``r_delta = (||delta||^2, delta_1, delta_2)`` of every pair.

    ``delta = key - query`` as in :func:`pixel_offsets`; returns ``(n_q, n_k, 3)`` with
    ``n_q = height * width`` and ``n_k = (height + 2p) * (width + 2p)``.
    """
    delta = pixel_offsets(height, width, padding)  # (n_q, n_k, 2)
    return torch.cat([delta.pow(2).sum(-1, keepdim=True), delta], dim=-1)  # (n_q, n_k, 3)


def relative_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    encoding: torch.Tensor,
    w_qry: torch.Tensor,
    w_key: torch.Tensor,
    w_key_pos: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    r"""Cordonnier et al.'s relative attention scores (their eq. (8)), every head at once.

    With row vectors ``q_i = x_i W_qry`` and ``k_j = x_j W_key`` (``d_k`` each) and the
    encoded offset ``p_ij = r_ij W^_key`` of the pair (``r_ij = encoding[i, j]``):

        A[h, i, j] = q_i . k_j  +  q_i . p_ij  +  u . k_j  +  v . p_ij
                   = (q_i + u) . k_j + (q_i + v) . p_ij

    (content - content, content - position, key content alone, position alone). No
    ``1/sqrt(d_k)`` factor: the paper has none, and it would only rescale ``W_qry``, ``u``, ``v``.

    Shapes: ``queries`` ``(B, n_q, C)``, ``keys`` ``(B, n_k, C)``, ``encoding``
    ``(n_q, n_k, D_p)``, ``w_qry`` and ``w_key`` ``(h, C, d_k)``, ``w_key_pos``
    ``(h, D_p, d_k)``, ``u`` and ``v`` ``(h, d_k)``; returns ``(B, h, n_q, n_k)``.

    Every tensor floating, of one dtype and device; the scores have it. Raises ``ValueError``
    naming the argument whose type, shape, dtype or device does not fit;
    :class:`mha.MemoryBudgetError` when the scores would exceed the memory budget.
    """
    for name, t, dim in [("queries", queries, 3), ("keys", keys, 3), ("encoding", encoding, 3),
                         ("w_qry", w_qry, 3), ("w_key", w_key, 3), ("w_key_pos", w_key_pos, 3),
                         ("u", u, 2), ("v", v, 2)]:
        require_float_tensor(name, t, min_dim=dim)
        if t.dim() != dim:
            raise ValueError(f"{name} must have {dim} dimensions, got shape {tuple(t.shape)}")
    (batch, n_q, channels), n_k = queries.shape, keys.shape[1]
    heads, d_k, d_p = w_qry.shape[0], w_qry.shape[2], encoding.shape[2]
    expected = [("keys", keys, (batch, n_k, channels)), ("encoding", encoding, (n_q, n_k, d_p)),
                ("w_qry", w_qry, (heads, channels, d_k)), ("w_key", w_key, (heads, channels, d_k)),
                ("w_key_pos", w_key_pos, (heads, d_p, d_k)), ("u", u, (heads, d_k)),
                ("v", v, (heads, d_k))]
    for name, t, shape in expected:
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    tensors = [("queries", queries)] + [(name, t) for name, t, _ in expected]
    require_same_dtype(*tensors)
    require_same_device(*tensors)
    # content, position and their sum: three (B, h, n_q, n_k) tensors at the peak
    check_output_allocation("relative_scores' scores", "encoding", encoding,
                            (3, batch, heads, n_q, n_k), queries.dtype,
                            f"use fewer positions (n_q, n_k = {n_q}, {n_k}), heads ({heads}) "
                            f"or a smaller batch ({batch})")
    q = torch.einsum("bic,hcd->bhid", queries, w_qry)  # (B, h, n_q, d_k)
    k = torch.einsum("bjc,hcd->bhjd", keys, w_key)  # (B, h, n_k, d_k)
    content = (q + u[:, None, :]) @ k.transpose(-2, -1)  # (B, h, n_q, n_k)
    # (q_i + v) . (r_ij W^) = ((q_i + v) W^T) . r_ij: never form the (h, n_q, n_k, d_k) tensor
    looking = (q + v[:, None, :]) @ w_key_pos.transpose(-2, -1)  # (B, h, n_q, D_p)
    position = torch.einsum("bhir,ijr->bhij", looking, encoding)  # (B, h, n_q, n_k)
    return content + position


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

    ``centres`` and ``alpha`` floating, of one dtype and device; the scores have it. Raises
    ``ValueError`` naming the argument for a wrong type, shape, dtype or size;
    :class:`mha.MemoryBudgetError` when the scores would exceed the memory budget.
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
    r = quadratic_offsets(height, width, padding).to(centres)  # (n_q, n_k, 3)
    return torch.einsum("hd,qkd->hqk", _quadratic_v(centres, alpha), r)


def _quadratic_v(centres: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``v_h = -alpha_h (1, -2 Delta_h1, -2 Delta_h2)``, shape ``(h, 3)``."""
    return -alpha[:, None] * torch.cat([torch.ones_like(alpha)[:, None], -2 * centres], dim=-1)


class GridSelfAttention(nn.Module):
    r"""Multi-head self-attention over the pixels of an image with Cordonnier et al.'s scores.

    ``y_q = b_O + sum_h W_O,h^T sum_k softmax_k(A_h(q, k)) W_V,h^T x_k`` with ``A_h`` the
    relative score of :func:`relative_scores` for the quadratic encoding
    ``r_delta = (||delta||^2, delta_1, delta_2)`` and ``W^_key = I`` (so ``d_k = 3``), as in
    the paper's eq. (9): ``v_h = -alpha_h (1, -2 Delta_h)`` makes the position term a Gaussian
    blob around the shift ``Delta_h``. With ``content=False`` (the default) ``W_qry = W_key = 0``
    and ``u = 0``: the heads score by position only (Cordonnier et al.'s Lemma 2), which is
    all a convolution needs. With ``content=True`` the content projections ``W_qry``,
    ``W_key`` (``(h, C_in, 3)``) and ``u`` (``(h, 3)``) are learnable too (zero at the start).

    The keys are the image's pixels plus ``padding`` rings of zero pixels around it, so that a
    border pixel can attend to a shift that leaves the image, as a zero-padded convolution does.
    The values and the output are the course's :class:`~mha.MultiHeadAttention` with one
    change: its output projection maps to ``out_channels`` instead of back to ``in_channels``
    (a convolution may change the number of channels; ``MultiHeadAttention``, like PyTorch's,
    returns as many features as its queries have). Its own ``W_Q``, ``W_K`` stay frozen at
    zero: the scores reach it as a float mask.

    Args:
        in_channels, out_channels: channels C_in of the input and C_out of the output.
        num_heads: h.
        head_dim: d_v per head; default ``min(in_channels, out_channels)``, which is what a
            convolution tap needs (its rank is at most that).
        padding: rings of zero pixels added around the key grid.
        bias: biases in the value and output projections.
        alpha: initial width parameter of every head.
        content: learn the content terms of the score as well.

    Parameters ``centres`` ``(h, 2)`` (random start, standard deviation 1) and ``alpha``
    ``(h,)`` are learnable. ``forward(x)``: ``(B, C_in, H, W) -> (B, C_out, H, W)``.

    Raises ``ValueError`` naming the argument for a bad size, ``padding``, ``bias``, ``alpha``
    or ``content``; :class:`mha.MemoryBudgetError` when the weights would exceed the memory
    budget.
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
        content: bool = False,
    ) -> None:
        super().__init__()
        in_channels = require_int("in_channels", in_channels)
        out_channels = require_int("out_channels", out_channels)
        num_heads = require_int("num_heads", num_heads)
        head_dim = require_optional_int("head_dim", head_dim)
        padding = require_int("padding", padding, minimum=0)
        bias = require_flag("bias", bias)
        alpha = require_positive("alpha", alpha)
        content = require_flag("content", content)
        head_dim = min(in_channels, out_channels) if head_dim is None else head_dim
        self.in_channels, self.out_channels = in_channels, out_channels
        self.num_heads, self.padding, self.content = num_heads, padding, content
        self.attn = MultiHeadAttention(in_channels, num_heads, head_dim=head_dim, bias=bias)
        # the one change to MultiHeadAttention: the output has out_channels features
        self.attn.out_proj = nn.Linear(num_heads * head_dim, out_channels, bias=bias)
        # the scores come from relative_scores, as a float mask: W_Q = W_K = 0, kept frozen
        for proj in (self.attn.q_proj, self.attn.k_proj):
            for p in proj.parameters():
                nn.init.zeros_(p)
                p.requires_grad_(False)
        self.centres = nn.Parameter(torch.randn(num_heads, 2))
        self.alpha = nn.Parameter(torch.full((num_heads,), float(alpha)))
        # the content terms of eq. (8), d_k = 3 so that W^_key = I: learnable, or zero buffers
        zeros = {"w_qry": (num_heads, in_channels, 3), "w_key": (num_heads, in_channels, 3),
                 "u": (num_heads, 3)}
        for name, shape in zeros.items():
            if content:
                self.register_parameter(name, nn.Parameter(torch.zeros(shape)))
            else:
                self.register_buffer(name, torch.zeros(shape))
        self.register_buffer("w_key_pos", torch.eye(3).expand(num_heads, 3, 3).clone())

    @property
    def head_dim(self) -> int:
        """Features per head of the attention layer inside.

        An int. Raises nothing."""
        return self.attn.head_dim

    def attention_weights(self, height: int, width: int) -> torch.Tensor:
        """Each head's attention ``(h, H * W, (H + 2p) * (W + 2p))``, which without content
        terms does not depend on the image (``content=True``: use :meth:`scores`).

        Float, of that shape, in the module's dtype. Raises ``ValueError`` naming ``height``
        or ``width`` (positive ints), or with ``content=True``; :class:`mha.MemoryBudgetError`
        when the weights would exceed the memory budget."""
        if self.content:
            raise ValueError("with content=True the weights depend on the image: "
                             "softmax(layer.scores(x), -1) gives them")
        # quadratic_encoding checks height and width
        scores = quadratic_encoding(height, width, self.centres, self.alpha, self.padding)
        return torch.softmax(scores, dim=-1)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """The relative scores ``(B, h, H * W, (H + 2p) * (W + 2p))`` of eq. (8) for ``x``
        (batch size 1 when ``content=False``: then they are the same for every image).

        ``x``: a floating image batch ``(B, C_in, H, W)``; the scores have its dtype. Raises
        ``ValueError`` naming ``x`` for a wrong type, shape or dtype;
        :class:`mha.MemoryBudgetError` when the scores would exceed the memory budget."""
        return self._scores(*self._tokens(x), *x.shape[-2:])

    def _scores(self, queries: torch.Tensor, keys: torch.Tensor, height: int,
                width: int) -> torch.Tensor:
        if not self.content:  # the scores do not depend on the image: one image serves all
            queries, keys = queries[:1], keys[:1]
        encoding = quadratic_offsets(height, width, self.padding).to(queries)
        v = _quadratic_v(self.centres, self.alpha)  # (h, 3)
        return relative_scores(queries, keys, encoding, self.w_qry, self.w_key,
                               self.w_key_pos, self.u, v)

    def _tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        require_float_tensor("x", x)
        if x.dim() != 4 or x.shape[1] != self.in_channels or 0 in x.shape[2:]:
            raise ValueError(
                f"x must have shape (batch, {self.in_channels}, height, width) with height, "
                f"width >= 1, got {tuple(x.shape)}"
            )
        require_module_dtype("x", x, self)
        p = self.padding
        queries = x.flatten(2).transpose(1, 2)  # (B, H*W, C_in)
        keys = F.pad(x, (p, p, p, p)).flatten(2).transpose(1, 2)  # (B, (H+2p)(W+2p), C_in)
        return queries, keys

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``, in the module's dtype: what the
        convolution computes. Raises ``ValueError`` naming ``x`` for another shape or dtype."""
        queries, keys = self._tokens(x)
        batch, _, height, width = x.shape
        scores = self._scores(queries, keys, height, width)  # (B or 1, h, n_q, n_k)
        # a float mask is added to the (here all-zero) scores of MultiHeadAttention itself
        out, _ = self.attn(queries, keys, keys, mask=scores, need_weights=False)
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

    Covers ``nn.Conv2d`` with an odd square kernel, stride 1, any dilation ``r`` (the heads
    sit on the shifts ``r Delta``, as Cordonnier et al. remark), any groups (a grouped
    convolution is the one whose taps are block diagonal) and "same" zero padding
    (``padding=r K//2`` or ``"same"``), with or without bias; anything else (a subclass of
    ``nn.Conv2d`` too) raises ``ValueError``. ``alpha`` is a number in ``(0, MAX_ALPHA]``. A
    stride ``s`` is the stride-1 convolution read at every ``s``-th pixel:
    ``conv_to_attention(stride-1 twin)(x)[..., ::s, ::s]``. The result maps
    ``(B, C_in, H, W)`` to ``(B, C_out, H, W)``.

    Raises ``ValueError`` naming ``conv`` or ``alpha`` as said above.
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
    if conv.dilation[0] != conv.dilation[1]:
        raise ValueError(f"only equal dilations are covered, got dilation={conv.dilation}")
    size, spread = k_h, conv.dilation[0]
    pad = spread * (size // 2)
    unsupported = [
        ("stride", conv.stride, (1, 1)),
        ("padding_mode", conv.padding_mode, "zeros"),
    ]
    for name, got, covered in unsupported:
        if got != covered:
            hint = (" (a strided convolution is the stride-1 one read at every s-th pixel)"
                    if name == "stride" else "")
            raise ValueError(f"only {name}={covered!r} is covered, got {name}={got!r}{hint}")
    # 'valid' is no padding: the 'same' one of a 1x1 kernel
    if conv.padding not in ("same", (pad, pad)) and not (conv.padding == "valid" and pad == 0):
        raise ValueError(
            f"only 'same' zero padding is covered (padding={pad} for a {size}x{size} kernel "
            f"with dilation {spread}), got padding={conv.padding!r}"
        )
    alpha = require_positive("alpha", alpha)
    if alpha > MAX_ALPHA:
        raise ValueError(f"alpha must be at most {MAX_ALPHA:g} (eps(alpha) is already 0 in "
                         f"float64 from about 745, and larger widths overflow float32 scores), "
                         f"got {alpha}")

    c_out, c_in = conv.out_channels, conv.in_channels
    heads = size * size
    layer = GridSelfAttention(c_in, c_out, heads, padding=pad, bias=conv.bias is not None)
    weight = _dense_weight(conv)  # (C_out, C_in, K, K)
    layer.to(device=weight.device, dtype=weight.dtype)
    taps = weight.permute(2, 3, 0, 1).reshape(heads, c_out, c_in)  # head u*K+v -> tap (u, v)
    d = layer.head_dim
    eye = torch.eye(d, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        u, v = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        layer.centres.copy_(spread * (torch.stack([u.flatten(), v.flatten()], dim=-1) - size // 2))
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


def _dense_weight(conv: nn.Conv2d) -> torch.Tensor:
    """``conv.weight`` as the ``(C_out, C_in, K, K)`` kernel of one group: block diagonal taps."""
    weight = conv.weight.detach()
    if conv.groups == 1:
        return weight
    g, c_in, c_out = conv.groups, conv.in_channels, conv.out_channels
    dense = weight.new_zeros(c_out, c_in, *weight.shape[2:])
    for i in range(g):  # group i maps input channels block i to output channels block i
        rows, cols = slice(i * c_out // g, (i + 1) * c_out // g), slice(i * c_in // g,
                                                                         (i + 1) * c_in // g)
        dense[rows, cols] = weight[rows]
    return dense


def construction_diagram(*, batch: str = "B", c_in: str = "C_in", c_out: str = "C_out",
                         height: str = "H", width: str = "W", heads: str = "h",
                         queries: str = "n_q", keys: str = "n_k", value: str = "d_v") -> Diagram:
    r"""The data flow of :class:`GridSelfAttention` as a convolution, shape by shape.

    An image ``(B, C_in, H, W)`` becomes ``n_q = H W`` query tokens and, padded with zero
    pixels, ``n_k`` key tokens; each of the ``h = K^2`` heads scores the keys by their offset
    from the query (:func:`relative_scores`; for a convolution only the position term is on),
    its softmax weights ``(h, n_q, n_k)`` (the same for every image) mix the values
    ``(B, h, n_k, d_v)``, the heads are concatenated to ``(B, n_q, h*d_v)``, ``W_O`` maps them
    to ``C_out`` channels and the tokens go back to an image ``(B, C_out, H, W)``. The symbols
    may be numbers (as strings) to draw a concrete case.
    """
    d = Diagram("A K×K convolution as K² heads")
    image = d.box("image $x$", (3, 10), kind="tensor")
    as_queries = d.box("pixels as tokens", (0, 8.6), width=2.4)
    offsets = d.box(r"offsets $r_{k-q}$", (3, 8.6), kind="tensor", width=1.9)
    as_keys = d.box("pad with zero pixels,\nthen as tokens", (6.2, 8.6), width=3.0, height=0.9)
    d.arrow(image, as_queries, (batch, c_in, height, width), via=[(0, 10)], label_side="left")
    d.arrow(image, as_keys, (batch, c_in, height, width), via=[(6.2, 10)])
    scores = d.box("relative scores (eq. 8),\nsoftmax over keys", (1.5, 6.8), width=3.4,
                   height=0.9, stack=3)
    d.arrow(as_queries, scores, (batch, queries, c_in), name="queries", label_side="left")
    d.arrow(offsets, scores, (queries, keys, "3"))
    w_v = d.box("$W_V$ of each head", (6.2, 6.8), width=2.5, stack=3)
    d.arrow(as_keys, w_v, (batch, keys, c_in), name="keys")
    mix = d.box("$A V$, each head", (3.5, 5.0), width=2.0, stack=3)
    d.arrow(scores, mix, (heads, queries, keys), name="A", label_side="left")
    d.arrow(w_v, mix, (batch, heads, keys, value), name="V", via=[(6.2, 5.0)],
            label_side="right")
    concat = d.box("concatenate heads", (3.5, 3.5), width=2.6)
    d.arrow(mix, concat, (batch, heads, queries, value))
    w_o = d.box("$W_O$", (3.5, 2.1), width=1.2)
    d.arrow(concat, w_o, (batch, queries, COURSE.times(heads, value)))
    back = d.box("tokens back to an image", (3.5, 0.7), width=3.4)
    d.arrow(w_o, back, (batch, queries, c_out))
    out = d.box("output", (3.5, -0.7), kind="tensor")
    d.arrow(back, out, (batch, c_out, height, width))
    return d
