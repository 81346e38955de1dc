"""ALiBi (Press et al. 2022): attention with linear biases instead of position embeddings."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha._validation import check_allocation, require_flag, require_float_dtype, require_int


def alibi_slopes(num_heads: int) -> torch.Tensor:
    r"""The head-specific slopes ``m_0 .. m_{h-1}`` of ALiBi, shape ``(num_heads,)``, float64.

    For ``h`` a power of two the slopes are the geometric sequence ``m_i = 2^{-8(i+1)/h}`` for
    heads ``i = 0 .. h-1`` (``h = 8``: 1/2, 1/4, ..., 1/256). Otherwise, as in the paper's
    code, take the ``h'`` slopes of the largest power of two ``h' < h`` and add every other
    slope of ``2h'`` heads.

    Raises ``ValueError`` naming ``num_heads`` (a positive int); :class:`mha.MemoryBudgetError`
    when the slopes would exceed the memory budget.
    """
    num_heads = require_int("num_heads", num_heads)
    check_allocation("alibi_slopes", (num_heads,), torch.float64, "use fewer heads")

    def geometric(h: int) -> torch.Tensor:  # 2^(-8i/h), i = 1..h, in numpy (no Python list)
        return torch.from_numpy(2.0 ** (-8.0 * np.arange(1, h + 1, dtype=np.float64) / h))

    if num_heads & (num_heads - 1) == 0:
        return geometric(num_heads)
    below = 2 ** math.floor(math.log2(num_heads))
    return torch.cat([geometric(below), geometric(2 * below)[0::2][: num_heads - below]])


def alibi_bias(
    num_heads: int,
    num_positions: int,
    *,
    causal: bool = True,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""The float mask ALiBi adds to the attention scores, shape ``(num_heads, n, n)``.

    .. math::
        B_{h, i, j} = -m_h\,(i - j) \quad (j \le i), \qquad
        B_{h, i, j} = -\infty \quad (j > i, \text{ if causal}),

    so a key ``i - j`` tokens back costs ``m_h`` per token of distance. ``causal=False`` gives
    the symmetric variant ``-m_h |i - j|`` (it cannot tell a key before the query from one
    after it). The bias depends on ``i`` and ``j`` only through ``i - j``: it is the same for
    every sequence length, which is what lets a model trained on short inputs run on long ones.
    Pass it as ``mask`` to :func:`mha.attention` with per-head queries ``(B, heads, n, d)``
    (it broadcasts to ``(B, heads, n, n)``). :class:`mha.MultiHeadAttention` refuses 3-D masks
    (``(B, n, n)`` and ``(heads, n, n)`` cannot be told apart), so give it the 4-D
    ``alibi_bias(h, n)[None]`` of shape ``(1, heads, n, n)``, in the module's dtype.

    The bias has ``dtype`` (floating; default torch's default dtype). Raises ``ValueError`` naming
    ``num_heads``, ``num_positions``, ``causal`` or ``dtype``; :class:`mha.MemoryBudgetError`
    when the bias would exceed the memory budget.
    """
    num_heads = require_int("num_heads", num_heads)
    num_positions = require_int("num_positions", num_positions, minimum=0)
    causal = require_flag("causal", causal)
    dtype = require_float_dtype("dtype", dtype)
    check_allocation("alibi_bias", (num_heads, num_positions, num_positions), torch.float64,
                     "use fewer positions (or chunked_attention(..., causal=True))")
    i = torch.arange(num_positions, dtype=torch.float64)
    distance = i[:, None] - i[None, :]  # (n, n): i - j
    bias = -alibi_slopes(num_heads)[:, None, None] * distance.abs()
    if causal:
        bias = bias.masked_fill(distance < 0, float("-inf"))
    return bias.to(dtype)
