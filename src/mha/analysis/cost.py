"""What a layer costs, counted: floating-point operations and the memory of the attention weights.

A multiply-add counts as 2 FLOPs (the convention of ``torch.utils.flop_counter``). Only the
matrix products are counted; the softmax, the bias additions and the nonlinearities add a
lower-order ``O(n^2)`` or ``O(n d)``.
"""

from __future__ import annotations

import torch

from mha._validation import require_float_dtype, require_int


def _require_sizes(**sizes: object) -> None:
    for name, size in sizes.items():
        require_int(name, size)


def attention_flops(n_q: int, n_k: int, d_k: int, d_v: int | None = None) -> int:
    r"""FLOPs of ``softmax(Q K^T / sqrt(d_k)) V`` for one head and one sequence.

    ``Q K^T`` is ``(n_q, d_k) @ (d_k, n_k)``: ``2 n_q n_k d_k``; the weights times ``V`` is
    ``(n_q, n_k) @ (n_k, d_v)``: ``2 n_q n_k d_v``. For self-attention (``n_q = n_k = n``,
    ``d_k = d_v = d``) that is ``4 n^2 d``: the ``O(n^2 d)`` of the seed.

    Raises ``ValueError`` naming a size that is not a positive int.
    """
    d_v = d_k if d_v is None else d_v
    _require_sizes(n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v)
    return 2 * n_q * n_k * d_k + 2 * n_q * n_k * d_v


def projection_flops(n: int, d: int) -> int:
    r"""FLOPs of the four ``d x d`` projections of a multi-head attention layer: ``8 n d^2``.

    ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V`` and the output projection ``W_O`` are each an
    ``(n, d) @ (d, d)`` product (``2 n d^2``), whatever the number of heads.

    Raises ``ValueError`` naming a size that is not a positive int.
    """
    _require_sizes(n=n, d=d)
    return 8 * n * d * d


def recurrent_flops(n: int, d: int) -> int:
    r"""FLOPs of an Elman RNN layer ``h_t = tanh(W_ih x_t + W_hh h_{t-1})`` over ``n`` steps.

    Two ``(d, d)`` matrix-vector products per step: ``4 n d^2``, i.e. ``O(n d^2)``, with
    ``n`` steps that must run one after the other.

    Raises ``ValueError`` naming a size that is not a positive int.
    """
    _require_sizes(n=n, d=d)
    return 4 * n * d * d


def convolution_flops(n: int, d: int, kernel_size: int) -> int:
    r"""FLOPs of a 1D convolution with ``d`` input and ``d`` output channels over ``n`` tokens.

    Each output position takes ``kernel_size`` input vectors through ``(d, d)`` matrices:
    ``2 k n d^2``, i.e. ``O(k n d^2)`` (``padding`` keeps ``n`` outputs).

    Raises ``ValueError`` naming a size that is not a positive int.
    """
    _require_sizes(n=n, d=d, kernel_size=kernel_size)
    return 2 * kernel_size * n * d * d


def attention_weights_bytes(
    n_q: int, n_k: int, *, heads: int = 1, batch: int = 1, dtype: torch.dtype = torch.float32
) -> int:
    """Bytes of the attention weights ``(batch, heads, n_q, n_k)``: ``batch*heads*n_q*n_k*size``.

    Raises ``ValueError`` naming a size that is not a positive int, or ``dtype`` (a floating
    ``torch.dtype``)."""
    _require_sizes(n_q=n_q, n_k=n_k, heads=heads, batch=batch)
    itemsize = require_float_dtype("dtype", dtype).itemsize
    return batch * heads * n_q * n_k * itemsize


def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, tokens: int, *, batch: int = 1,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes of a decoder's key/value cache: ``2 * layers * kv_heads * head_dim * tokens * size``.

    Every layer keeps a key and a value (the 2) of ``head_dim`` numbers per key/value head for
    every cached token, for each of ``batch`` sequences; ``size`` is the bytes of one number
    (4 for float32, 2 for bfloat16). Fewer key/value heads (grouped-query attention) shrink
    it in proportion; the number of query heads does not enter.

    Raises ``ValueError`` naming a size that is not a positive int, or ``dtype`` (a
    ``torch.dtype``).
    """
    _require_sizes(layers=layers, kv_heads=kv_heads, head_dim=head_dim, tokens=tokens,
                   batch=batch)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * layers * kv_heads * head_dim * tokens * batch * itemsize
