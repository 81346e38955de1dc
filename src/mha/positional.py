"""The sinusoidal positional encoding of Vaswani et al. (2017) and its relative-shift rotation."""

from __future__ import annotations

import torch

from mha._checks import (
    check_allocation,
    require_base,
    require_float_dtype,
    require_int,
    require_number,
)


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
    """
    offset = require_number("offset", offset)
    dtype = require_float_dtype("dtype", dtype)
    check_allocation("relative_rotation", (_require_even_dim(dim),) * 2, torch.float64,
                     "use a smaller dim")
    theta = offset * encoding_frequencies(dim, base)  # (dim/2,)
    cos, sin = theta.cos(), theta.sin()
    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)
    return torch.block_diag(*blocks).to(dtype)
