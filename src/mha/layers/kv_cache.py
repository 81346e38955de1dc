"""The KV cache: the keys and values a decoder layer has already computed, kept for later steps."""

from __future__ import annotations

import weakref

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


class LayerBound:
    """The binding of a cache to the layer that first fills it (shared by :class:`KVCache`
    and :class:`mha.LatentCache`).

    Caches of layers of the same shape fit each other's tensors, so a swapped cache (a
    decoder's caches reversed, another model's caches) used to run and give wrong outputs.
    The cache keeps a weak reference to its layer (it does not keep the layer alive) and the
    layer refuses a filled cache that another layer filled. ``copy.deepcopy`` keeps the
    binding (to the copied layer when the layer is copied in the same call); ``pickle`` and
    ``copy.copy`` drop it (a layer is not pickled with its cache): an unpickled or
    shallow-copied cache binds to the next layer that uses it. Inside ``torch.compile`` the
    binding is neither checked nor made.
    """

    _owner: weakref.ref | None = None  # the class default: an empty cache, or an unpickled one

    def _filled(self) -> bool:
        raise NotImplementedError

    def _check_layer(self, layer: torch.nn.Module) -> None:
        """Refuse ``layer`` if another layer filled this cache (before anything changes)."""
        if self._owner is None or not self._filled() or torch.compiler.is_compiling():
            return
        owner = self._owner()
        if owner is layer:
            return
        who = ("a layer that no longer exists" if owner is None
               else f"another {type(owner).__name__} (a different layer object)")
        raise ValueError(
            f"cache was filled by {who}, not by this {type(layer).__name__}: caches of layers "
            f"of the same shape fit each other but hold other keys, so the output would be "
            f"wrong. Pass each layer the cache it filled (caches[i] for layer i, in the order "
            f"model.new_caches() makes them), or a new empty cache")

    def _bind(self, layer: torch.nn.Module) -> None:
        """Remember ``layer`` as the owner after its first successful append."""
        if self._owner is None and not torch.compiler.is_compiling():
            self._owner = weakref.ref(layer)

    def _copy_binding(self, copy: LayerBound, memo: dict) -> None:
        owner = None if self._owner is None else self._owner()
        if owner is not None:
            # deepcopy((model, caches)): the copied caches belong to the copied layers
            copy._owner = weakref.ref(memo.get(id(owner), owner))
        elif self._owner is not None:
            copy._owner = self._owner  # a dead owner stays dead: the copy is refused too

    def __getstate__(self) -> dict:
        state = dict(vars(self))
        state.pop("_owner", None)  # a weak reference cannot be pickled (see the class)
        return state


class KVCache(LayerBound):
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

    The first layer that fills a cache owns it (:class:`LayerBound`): another layer, even one
    of the same shape, refuses it with a ``ValueError``.

    Raises nothing when made; :meth:`append` and ``copy.deepcopy`` raise ``ValueError`` as said
    above.
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        """The number of tokens cached."""
        return 0 if self.keys is None else self.keys.shape[-2]

    def _filled(self) -> bool:
        return self.keys is not None

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
        self._copy_binding(copy, memo)
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
            # the strides of every later torch.cat, so that a compiled step sees one layout (a
            # head-split view of the projections has other strides: a recompile). A copy, not
            # .contiguous(): with one key/value head that dimension's stride is free, and
            # torch calls the view contiguous as it is (tester 51: a second graph)
            self.keys = keys.clone(memory_format=torch.contiguous_format)
            self.values = values.clone(memory_format=torch.contiguous_format)
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
