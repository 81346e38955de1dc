"""The sinusoidal positional encoding of Vaswani et al. (2017) and its relative-shift rotation."""

from __future__ import annotations

import torch

from mha._validation import (
    check_allocation,
    require_base,
    require_float_dtype,
    require_int,
    require_number,
)
from mha.diagrams import COURSE, Diagram, Notation


def _require_even_dim(dim: object) -> int:
    dim = require_int("dim", dim)
    if dim % 2:
        raise ValueError(f"dim must be a positive even int (sin and cos come in pairs), got {dim}")
    return dim


def encoding_frequencies(dim: int, base: float = 10000.0) -> torch.Tensor:
    r"""The angular frequencies ``omega_j = base ** (-2j / dim)``, ``j = 0 .. dim/2 - 1``.

    Column pair ``(2j, 2j+1)`` of the encoding turns with frequency ``omega_j``, so its
    wavelength is ``2 pi / omega_j``: from ``2 pi`` (``j = 0``) up to
    ``2 pi * base ** (1 - 2 / dim)``, just below ``2 pi * base``. Shape ``(dim // 2,)``, float64.

    Raises ``ValueError`` naming ``dim`` (a positive even int) or ``base`` (a finite number >
    1); :class:`mha.MemoryBudgetError` when the result would exceed the memory budget.
    """
    dim = _require_even_dim(dim)
    base = require_base(base)
    check_allocation("encoding_frequencies", (dim // 2,), torch.float64, "use a smaller dim")
    j = torch.arange(dim // 2, dtype=torch.float64)
    return base ** (-2.0 * j / dim)


def sinusoidal_encoding(
    num_positions: int,
    dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""The matrix ``P`` of the sinusoidal positional encoding, shape ``(num_positions, dim)``.

    .. math::
        P_{i, 2j} = \sin(i\,\omega_j), \qquad P_{i, 2j+1} = \cos(i\,\omega_j),
        \qquad \omega_j = \mathrm{base}^{-2j/\mathrm{dim}},

    for positions ``i = 0 .. num_positions - 1``. Add it to token embeddings ``X`` of shape
    ``(batch, num_positions, dim)`` as ``X + P``. The angles are computed in float64 and the
    result is cast to ``dtype`` (default: torch's default dtype).

    Raises ``ValueError`` naming ``num_positions``, ``dim`` (positive, even), ``base`` or
    ``dtype`` (a floating dtype); :class:`mha.MemoryBudgetError` when the matrix would exceed
    the memory budget.
    """
    num_positions = require_int("num_positions", num_positions, minimum=0)
    dtype = require_float_dtype("dtype", dtype)
    # the float64 angles and their sines and cosines: a few tables of this size
    check_allocation("sinusoidal_encoding", (num_positions, _require_even_dim(dim)),
                     torch.float64, "use fewer positions or a smaller dim")
    omega = encoding_frequencies(dim, base)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * omega  # (n, dim/2)
    # interleave: sin in the even columns, cos in the odd ones
    encoding = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(num_positions, dim)
    return encoding.to(dtype)


def relative_rotation(
    offset: float,
    dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""The matrix ``M_k`` that moves the encoding ``offset = k`` positions on, ``(dim, dim)``.

    ``M_k`` is block diagonal with one 2x2 rotation per frequency:

    .. math::
        M_k = \mathrm{diag}(R(k\omega_0), \dots, R(k\omega_{d/2-1})), \qquad
        R(\theta) = \begin{pmatrix} \cos\theta & \sin\theta \\ -\sin\theta & \cos\theta
        \end{pmatrix},

    so that for every position ``i`` (the sine and cosine addition formulas)

    ``P[i + k] = M_k @ P[i]``, i.e. ``sinusoidal_encoding(n + k)[k:] ==
    sinusoidal_encoding(n) @ relative_rotation(k, dim).T``.

    ``M_k`` does not depend on ``i``: shifting by ``k`` is one linear map for all positions.

    Returns ``(dim, dim)`` in ``dtype`` (floating; default torch's default dtype). Raises
    ``ValueError`` naming ``offset``, ``dim`` (positive, even), ``base`` or ``dtype``;
    :class:`mha.MemoryBudgetError` when the matrix would exceed the memory budget.
    """
    offset = require_number("offset", offset)
    dtype = require_float_dtype("dtype", dtype)
    check_allocation("relative_rotation", (_require_even_dim(dim),) * 2, torch.float64,
                     "use a smaller dim")
    theta = offset * encoding_frequencies(dim, base)  # (dim/2,)
    cos, sin = theta.cos(), theta.sin()
    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)
    return torch.block_diag(*blocks).to(dtype)


def positions_diagram(notation: Notation = COURSE) -> Diagram:
    r"""Where positions enter attention, two ways, shape by shape.

    Left, absolute: the encoding ``P`` ``(n, d)`` is added to the token embeddings ``X``
    ``(B, n, d)`` before multi-head attention. Right, RoPE: ``X`` is projected and split into
    heads, and each head's queries and keys ``(B, h, n, d_k)`` are rotated by their positions
    ``(n,)`` before the scores; the values ``(B, h, n, d_v)`` are not rotated.
    """
    s = notation
    d = Diagram("Positions: added to X, or rotating q and k (RoPE)")
    x_abs = d.box("tokens $X$", (0, 8.0), kind="tensor", width=1.6)
    p = d.box("encoding $P$", (2.6, 8.0), kind="tensor", width=1.8)
    add = d.box("$X + P$", (0, 6.6), width=1.6)
    d.arrow(x_abs, add, (s.batch, s.tokens, s.width), label_side="left")
    d.arrow(p, add, (s.tokens, s.width), via=[(2.6, 6.6)])
    attend_abs = d.box("multi-head\nattention", (0, 5.0), width=2.0, height=0.9, stack=3)
    d.arrow(add, attend_abs, (s.batch, s.tokens, s.width), label_side="left")
    out_abs = d.box("output", (0, 3.4), kind="tensor", width=1.6)
    d.arrow(attend_abs, out_abs, (s.batch, s.tokens, s.width), label_side="left")

    x_rope = d.box("tokens $X$", (6.8, 8.0), kind="tensor", width=1.6)
    split = d.box("$W_Q$, $W_K$, $W_V$, split heads", (6.8, 6.6), width=3.6)
    d.arrow(x_rope, split, (s.batch, s.tokens, s.width))
    rotate = d.box("rotate by position", (6.4, 5.0), width=2.8, stack=3)
    d.arrow(split, rotate, (s.batch, s.heads, s.tokens, s.key), name="q, k", label_side="left")
    where = d.box("positions", (3.6, 5.0), kind="tensor", width=1.5)
    d.arrow(where, rotate, f"({s.tokens},)", label_at=(4.65, 4.62))
    attend = d.box("attention, each head", (6.8, 3.4), width=3.0, stack=3)
    d.arrow(rotate, attend, (s.batch, s.heads, s.tokens, s.key), label_side="left")
    d.arrow(split, attend, (s.batch, s.heads, s.tokens, s.value), name="v",
            via=[(8.3, 4.2)])
    merge = d.box("concatenate, $W_O$", (6.8, 1.9), width=2.6)
    d.arrow(attend, merge, (s.batch, s.heads, s.tokens, s.value))
    out = d.box("output", (6.8, 0.5), kind="tensor", width=1.6)
    d.arrow(merge, out, (s.batch, s.tokens, s.width))
    return d
