"""The KV cache: the keys and values a decoder layer has already computed, kept for later steps."""

from __future__ import annotations

import torch

from mha._validation import (
    check_allocation,
    refuse_autograd_history,
    refuse_vmap_leftovers,
    require_cached_dtype,
    require_float_tensor,
    require_same_device,
    require_same_dtype,
)


class KVCache:
    r"""Keys and values of every token seen so far, for one attention layer.

    A decoder generating token ``t`` needs the keys and values of tokens ``0 .. t``. Those of
    ``0 .. t-1`` do not change once computed (causal attention: earlier tokens never see later
    ones), so each step projects only the new token and appends it here. The cache then holds
    ``2 * n * h_kv * d_k`` numbers per layer: keys and values, ``n`` tokens, ``h_kv`` key/value
    heads (fewer than the query heads in grouped-query attention) of ``d_k`` features.

    Shapes: ``keys`` and ``values`` are ``(B, h_kv, n, d_k)`` and ``(B, h_kv, n, d_v)``, or
    ``None`` while the cache is empty. Pass one cache per layer as
    ``MultiHeadAttention(...)(x, cache=cache, is_causal=True)``.

    A compiled decode step (``torch.compile``) may take the cache as an argument: each
    ``append`` in eager mode marks the length dimension dynamic, so the step compiles once
    for every length (``tests/test_compile.py``: 64 steps, one compilation). An ``append``
    inside compiled code cannot mark it: a prompt through the compiled step too costs more
    graphs (three at first; see :class:`mha.MultiHeadAttention`).

    The cache keeps the autograd history of what it holds: a second ``backward()`` through
    earlier steps needs ``retain_graph=True``, or fill the cache under ``torch.no_grad()``
    (as :func:`mha.generate` does); ``copy.deepcopy`` refuses such a cache, as torch refuses
    to deepcopy a non-leaf tensor. Inside ``torch.func.vmap`` pass keys and values in and out
    as tensors: a cache filled there holds vmap's batched tensors, which do not outlive it.

    Raises nothing when made; :meth:`append` and ``copy.deepcopy`` raise ``ValueError`` as said
    above.
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        """The number of tokens cached."""
        return 0 if self.keys is None else self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held: ``keys`` and ``values`` together.

        Raises nothing."""
        if self.keys is None or self.values is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values))

    def __deepcopy__(self, memo: dict) -> KVCache:
        """A copy with cloned tensors; refused while they carry autograd history."""
        refuse_autograd_history("KVCache", (self.keys, self.values), "keys", "values")
        copy = KVCache()
        copy.keys, copy.values = (None if t is None else t.clone()
                                  for t in (self.keys, self.values))
        return copy

    def append(
        self, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new tokens' ``keys`` ``(B, h_kv, n_new, d_k)`` and ``values``; return all.
        NaN or inf values are stored as given: like any attention input they reach the outputs
        that read them (nothing non-finite is hidden, see :func:`mha.attention`).

        Raises ``ValueError`` for tensors that are not 4-D floating, of another dtype or
        device than the cache, or whose ``(B, h_kv, ., d)`` do not fit it (nothing is added
        then), and :class:`mha.MemoryBudgetError` when the cache would exceed the budget."""
        require_float_tensor("keys", keys, dim=4)
        require_float_tensor("values", values, dim=4)
        refuse_vmap_leftovers("KVCache", self.keys, keys, "keys and values")
        require_same_dtype(("keys", keys), ("values", values))
        if self.keys is not None:
            require_cached_dtype(("keys", "values"), self.keys, keys)
        require_same_device(("keys", keys), ("values", values))
        if self.keys is not None and keys.device != self.keys.device:
            raise ValueError(f"keys are on {keys.device} but this cache holds keys on "
                             f"{self.keys.device}: use one cache per device (a new KVCache)")
        if keys.shape[:3] != values.shape[:3]:
            raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must "
                             f"agree in (B, h_kv, n_new)")
        if self.values is not None and values.shape[-1] != self.values.shape[-1]:
            raise ValueError(f"new values of shape {tuple(values.shape)} do not fit the cached "
                             f"values of shape {tuple(self.values.shape)}: d_v must agree")
        n = len(self) + keys.shape[-2]
        check_allocation("the KV cache", (2, *keys.shape[:2], n, max(keys.shape[-1],
                         values.shape[-1])), keys.dtype,
                         lambda: f"use shorter sequences (the cache holds {len(self)} tokens, "
                         f"keys adds {keys.shape[-2]}) or a smaller batch ({keys.shape[0]})")
        if self.keys is None or self.values is None:
            # contiguous like every later torch.cat, so that a compiled step sees one layout
            # (a head-split view of the projections has other strides: a recompile)
            self.keys, self.values = keys.contiguous(), values.contiguous()
        else:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[-1] != self.keys.shape[-1]:
                raise ValueError(
                    f"new keys of shape {tuple(keys.shape)} do not fit the cached keys of shape "
                    f"{tuple(self.keys.shape)}: (B, h_kv, ·, d_k) must agree")
            self.keys = torch.cat([self.keys, keys], dim=-2)  # (B, h_kv, n + n_new, d_k)
            self.values = torch.cat([self.values, values], dim=-2)  # (B, h_kv, n + n_new, d_v)
        if not torch.compiler.is_compiling():
            # the length grows at every step: a compiled step traces it as a symbol from its
            # first call instead of compiling once per length (hints only, nothing is copied)
            torch._dynamo.maybe_mark_dynamic(self.keys, 2)
            torch._dynamo.maybe_mark_dynamic(self.values, 2)  # (B, h_kv, n, d)
        return self.keys, self.values
