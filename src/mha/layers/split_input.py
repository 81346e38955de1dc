"""Seed 002 read literally: split each token into h chunks first, then let head i see chunk i only.

This is *not* the multi-head attention of Vaswani et al. (where every head projects the whole
token); it is the special case whose projections ``W_Q``, ``W_K``, ``W_V`` are block diagonal.
Chapter 4 compares the two.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from mha.layers.multi_head import MultiHeadAttention


class _BlockDiagonal(nn.Module):
    """Parametrization: ``h`` blocks ``(h, c, c)`` -> the block-diagonal weight ``(h c, h c)``."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads

    def forward(self, blocks: torch.Tensor) -> torch.Tensor:
        return torch.block_diag(*blocks.unbind(0))

    def right_inverse(self, weight: torch.Tensor) -> torch.Tensor:
        # keep only the diagonal blocks of an initial full weight
        c = weight.shape[0] // self.num_heads
        return torch.stack([weight[i * c:(i + 1) * c, i * c:(i + 1) * c]
                            for i in range(self.num_heads)])


class SplitInputAttention(MultiHeadAttention):
    r"""Multi-head self-attention where head ``i`` only sees the ``i``-th chunk of each token.

    With ``c = d / h`` and ``X_i = X[:, (i-1)c : ic]`` (seed 002's :math:`\mathbf V_i`):

    ``head_i = softmax(X_i W_Q^(i) (X_i W_K^(i))^T / sqrt(c)) X_i W_V^(i)``,
    ``W_Q^(i), W_K^(i), W_V^(i)`` in ``R^{c x c}``, output ``Concat(head_1..head_h) W_O``.

    It is a ``MultiHeadAttention`` whose ``q_proj``, ``k_proj``, ``v_proj`` weights are
    constrained to be block diagonal (``torch.nn.utils.parametrize``), so the forward pass,
    masks and ``head_mask`` are the parent's. Each of those three projections has
    ``h c^2 = d^2 / h`` free weights instead of ``d^2``.

    Shapes as in ``MultiHeadAttention``: ``x`` ``(B, n, d)`` -> ``(B, n, d)`` and weights
    ``(B, h, n, n)``. Self-attention only (``kdim = vdim = d``).

    Raises ``ValueError`` as :class:`mha.MultiHeadAttention` does for bad sizes (``embed_dim``
    must divide into ``num_heads`` chunks); :class:`mha.MemoryBudgetError` when the weights
    would exceed the memory budget.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, bias: bool = True) -> None:
        super().__init__(embed_dim, num_heads, bias=bias)
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            parametrize.register_parametrization(
                proj, "weight", _BlockDiagonal(num_heads), unsafe=True
            )
