"""Rotary position embeddings (RoPE, Su et al. 2021): rotate queries and keys by their position."""

from __future__ import annotations

import torch

from mha._validation import (
    check_output_allocation,
    may_read_values,
    refuse_float8,
    require_base,
    require_features,
    require_flag,
    require_float_tensor,
    require_same_device,
    require_tensor,
    require_within,
)
from mha.layers.multi_head import MultiHeadAttention
from mha.layers.positional import encoding_frequencies

#: largest |position| apply_rotary accepts (see the check there)
MAX_POSITION = 2**32


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    r"""Rotate feature pair ``(x_{2j}, x_{2j+1})`` of the token at position ``p`` by ``p omega_j``.

    .. math::
        \begin{pmatrix} y_{2j} \\ y_{2j+1} \end{pmatrix} =
        \begin{pmatrix} \cos p\omega_j & -\sin p\omega_j \\ \sin p\omega_j & \cos p\omega_j
        \end{pmatrix}
        \begin{pmatrix} x_{2j} \\ x_{2j+1} \end{pmatrix},
        \qquad \omega_j = \mathrm{base}^{-2j/d}

    (the frequencies of the sinusoidal encoding). In complex numbers: ``y_j = x_j e^{i p omega_j}``
    with ``x_j = x_{2j} + i x_{2j+1}``. Applied to queries at ``m`` and keys at ``n``, the score
    ``q_m . k_n = Re sum_j q_j conj(k_j) e^{i (m - n) omega_j}`` depends on the positions only
    through the offset ``m - n``.

    Shapes: ``x`` ``(..., n, d)`` with ``d`` even, e.g. ``(batch, heads, n, head_dim)``;
    ``positions`` ``(n,)`` (default ``0 .. n-1``) or with ``x.dim() - 1`` dimensions that
    broadcast to ``x.shape[:-1]``, e.g. ``(B, 1, n)`` for per-sequence positions.
    Returns a tensor of ``x``'s shape; rotations keep every vector's norm. Positions beyond
    ``+-2**32`` are refused (their angles would no longer resolve the offsets). NaN and inf
    in ``x`` stay in the rotated pairs that hold them (a rotation mixes the two of a pair).

    Raises ``ValueError`` naming ``x``, ``positions`` or ``base`` for a wrong shape, dtype,
    device or value (the range and finiteness of ``positions`` are read in eager mode only:
    compiled code cannot branch on values), :class:`mha.MemoryBudgetError` before an
    over-budget allocation.
    """
    require_float_tensor("x", x, min_dim=2)
    refuse_float8("x", x)  # torch has no arithmetic for it
    n, d = x.shape[-2], x.shape[-1]
    if d % 2 or d == 0:
        raise ValueError(f"the last dimension of x must be even and >= 2 to form pairs, "
                         f"got shape {tuple(x.shape)}")
    if positions is None:
        positions = torch.arange(n, device=x.device)
    require_tensor("positions", positions)
    if positions.dtype == torch.bool or positions.is_complex():
        raise ValueError(f"positions must be integer or real, got {positions.dtype}")
    if positions.is_floating_point():
        refuse_float8("positions", positions)  # torch has no isfinite or arithmetic for it
    require_same_device(("x", x), ("positions", positions))
    if positions.dim() not in (1, x.dim() - 1):
        # (B, n) against x (B, h, n, d) would line B up with the heads: refuse, as for masks
        raise ValueError(f"positions must have shape (n,) = ({n},), or x's tokens' "
                         f"{x.dim() - 1} dimensions {tuple(x.shape[:-1])} (e.g. (B, 1, n) for "
                         f"x (B, h, n, d)), got shape {tuple(positions.shape)}")
    try:
        grown = torch.broadcast_shapes(positions.shape, x.shape[:-1]) != x.shape[:-1]
    except RuntimeError:
        grown = True
    if grown:
        raise ValueError(f"positions of shape {tuple(positions.shape)} must broadcast to x's "
                         f"tokens {tuple(x.shape[:-1])} without growing them")
    if positions.is_floating_point() and may_read_values(positions) and not bool(
            torch.isfinite(positions).all()):
        raise ValueError("positions must be finite, got NaN or inf")
    # float64 angles p * omega carry an error near |p| * 2**-53 rad: below 2**32 it stays under
    # float32's resolution, beyond it the scores would stop depending on offsets only
    require_within("positions", positions, MAX_POSITION, "float64 angles lose the offsets "
                   "beyond 2**32; subtract a common offset (only differences matter)")
    check_output_allocation("apply_rotary's output", "x", x, x.shape, x.dtype,
                            "use fewer tokens or smaller batches")
    check_output_allocation("apply_rotary's angles", "positions", positions,
                            (*positions.shape, d // 2), torch.float64,
                            "use fewer positions")
    # angles in float64 so that large positions keep their precision, then x's dtype
    omega = encoding_frequencies(d, base).to(x.device)
    angles = positions.to(torch.float64)[..., None] * omega  # (..., n, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)


class RotaryMultiHeadAttention(MultiHeadAttention):
    r"""Multi-head self-attention whose per-head queries and keys are rotated by ``apply_rotary``.

    The parameters are those of :class:`mha.MultiHeadAttention` (``head_dim`` must be even);
    only the step between the projections and the attention changes:
    ``head_i = Attention(RoPE(X W_Q,i), RoPE(X W_K,i), X W_V,i)``. Values are not rotated.
    It compiles in one graph (``fullgraph=True``; ``dynamic=True``: one for every length); the
    range check on ``positions`` runs in eager mode only.

    Raises ``ValueError`` as :class:`mha.MultiHeadAttention` does, and for an odd ``head_dim``
    or a bad ``base``; :class:`mha.MemoryBudgetError` when the weights would exceed the memory
    budget.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        head_dim: int | None = None,
        base: float = 10000.0,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(embed_dim, num_heads, bias=bias, head_dim=head_dim,
                         num_kv_heads=num_kv_heads, dropout=dropout)
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
        self.base = require_base(base)

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention on ``x`` ``(B, n, embed_dim)`` with tokens at ``positions`` ``(n,)``
        (or ``(B, n)``, one row per sequence).

        ``mask`` and ``is_causal`` as in :class:`mha.MultiHeadAttention`; grouped-query heads
        (``num_kv_heads``) and dropout (in training) as there too. These are all it takes:
        unlike :meth:`mha.MultiHeadAttention.forward` there is no ``key``/``value`` (it is
        self-attention), ``cache``, ``need_weights`` (the weights are always computed),
        ``head_mask`` or ``key_padding_mask`` (pass padding in ``mask`` as ``(B, 1, 1, n)``,
        True = may attend); Python's ``TypeError`` names any of those. Returns
        ``(output (B, n, embed_dim), weights (B, h, n, n))``. NaN and inf in ``x`` reach the
        outputs (the rule of :func:`mha.attention`). Raises ``ValueError`` naming ``x``,
        ``positions``, ``is_causal`` or ``mask`` when its type, shape, dtype or device does not
        fit (positions beyond ``+-2**32`` too, in eager mode), :class:`mha.MemoryBudgetError`
        before an over-budget allocation.
        """
        require_features("x", x, self.embed_dim, self)
        is_causal = require_flag("is_causal", is_causal)
        batch, n, _ = x.shape
        if positions is not None:
            require_tensor("positions", positions)
            if tuple(positions.shape) not in [(n,), (batch, n)]:
                raise ValueError(f"positions must have shape ({n},) or ({batch}, {n}) to match "
                                 f"x of shape {tuple(x.shape)}, got {tuple(positions.shape)}")
            positions = positions[:, None, :] if positions.dim() == 2 else positions  # (B, 1, n)
        check_output_allocation("the attention weights", "x", x,
                                (batch, self.num_heads, n, n), x.dtype,
                                "use fewer tokens or smaller batches")
        self._check_projections(x, x)
        if mask is not None:
            self._check_mask(mask, batch, n, n)
        q = apply_rotary(self._split_heads(self.q_proj(x)), positions, self.base)
        k = apply_rotary(self._split_heads(self.k_proj(x), self.num_kv_heads), positions,
                         self.base)  # (B, h_kv, n, d)
        v = self._split_heads(self.v_proj(x), self.num_kv_heads)  # (B, h_kv, n, d)
        dropout = self.dropout if self.training else 0.0
        heads, weights = self._explicit_attention(q, k, v, mask, is_causal, dropout)
        merged = heads.transpose(1, 2).reshape(batch, n, self.num_heads * self.head_dim)
        return self.out_proj(merged), weights
