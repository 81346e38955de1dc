"""Multi-head attention: h heads, each with its own projections, concatenated and projected.

Compiling and vmapping: see the class docstring of :class:`MultiHeadAttention`.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrize import is_parametrized

from mha._validation import (
    all_finite,
    check_allocation,
    check_output_allocation,
    get_debug,
    may_read_values,
    require_broadcastable_mask,
    require_flag,
    require_float_tensor,
    require_head_mask,
    require_int,
    require_module_device,
    require_module_dtype,
    require_optional_int,
    require_probability,
    require_same_device,
    require_same_dtype,
    require_tensor,
    under_vmap,
)
from mha.layers.attention import additive_mask, attend, causal_mask, combine_masks
from mha.layers.kv_cache import KVCache


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention (Vaswani et al. 2017), batch first.

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O`` with
    ``head_i = softmax(Q W_Q,i (K W_K,i)^T / sqrt(d_k)) V W_V,i``, where
    ``W_Q,i`` is ``(embed_dim, d_k)``, ``W_K,i`` is ``(kdim, d_k)``, ``W_V,i`` is
    ``(vdim, d_v)`` and ``W_O`` is ``(h d_v, embed_dim)`` (here ``d_k = d_v = head_dim``):
    ``(B, n_q, embed_dim) -> q (B, h, n_q, d_k)``, scores and weights ``(B, h, n_q, n_k)``,
    heads ``(B, h, n_q, d_v)`` -> concatenated ``(B, n_q, h d_v)`` -> ``(B, n_q, embed_dim)``.

    The h per-head projections ``W_Q,i`` (``embed_dim x head_dim``) are stored side by side in one
    ``nn.Linear`` (``q_proj``, output ``num_heads * head_dim``), and likewise for keys and values:
    one big projection split into heads computes exactly the h separate ones.

    With ``num_kv_heads = h_kv < h`` (grouped-query attention, Ainslie et al. 2023; ``h_kv = 1``
    is multi-query attention, Shazeer 2019) there are only ``h_kv`` key and value heads, and
    query head ``i`` uses key/value head ``i // (h / h_kv)``: the grouping of
    ``scaled_dot_product_attention(..., enable_gqa=True)``.

    Args:
        embed_dim: feature size d of the queries and of the output.
        num_heads: number of (query) heads h.
        kdim, vdim: feature sizes of keys and values (default ``embed_dim``), for cross-attention.
        bias: add biases to the four projections.
        head_dim: d_k = d_v per head; defaults to ``embed_dim // num_heads``.
        num_kv_heads: key/value heads h_kv, a divisor of h; defaults to h.
        dropout: probability of zeroing each attention weight in training (the weights returned
            are the dropped ones, as in ``nn.MultiheadAttention``); nothing in ``eval()`` mode.

    Compiling, exporting, vmapping. ``torch.compile(fullgraph=True)`` traces every path in one
    graph (weights or fused, causal, masks, grouped-query heads, a :class:`mha.KVCache`), and
    ``dynamic=True`` makes that one graph for every sequence length. A decode loop compiles
    once and never recompiles as the cache grows when the prompt goes through the eager layer
    and only the one-token steps through the compiled one: the cache marks its length dynamic
    as eager code fills it (``torch._dynamo.maybe_mark_dynamic``), and no check turns a size
    into a constant (transformers' ``generate`` also runs the prompt eagerly). The first new
    batch size adds one graph (Dynamo then traces the batch as a symbol), and a
    ``key_padding_mask`` growing with the cache one more, at the second step (nothing marks
    the mask's length dynamic, so the first step takes it as a constant). A prompt through the
    compiled step too makes three graphs: the prompt's, then the step's twice, as PyTorch
    marks a length only outside compiled code, so the cache the prompt's call fills has a
    constant length until it grows; the first new prompt length adds one graph more, the
    first new batch size two. ``dynamic=True`` makes it two graphs in all, save that Dynamo
    ties a size equal to one of the layer's (a prompt of ``head_dim`` tokens) to that
    constant: a recompile. One graph cannot serve both: an empty cache holds no tensors, and
    Dynamo specializes a length of 1. With ``dynamic=True`` and a ``head_mask``, a first call
    whose length equals ``num_heads`` compiles one graph more (2 for lengths 4, 6, 9 with 4
    heads): Dynamo's duck sizing gives the length the gates' symbol, which their shape check
    ties to ``num_heads``; ``torch._dynamo.mark_static(head_mask)`` before each call keeps it
    to one graph. Duck sizing also gives a first length equal to the batch size the batch's
    symbol, and a later length then compiles once more (2 graphs for lengths 3, 5, 7, 9 at
    batch 3, 1 at batch 2): ``torch._dynamo.mark_dynamic`` on both dimensions, or a first call
    whose length differs from the batch, keeps one.
    ``torch.export`` with a dynamic length works, and
    ``torch.func.vmap`` maps the layer over an extra leading dimension (masks included; with
    autograd on, a float mask takes the weights path under vmap even with
    ``need_weights=False``, as PyTorch's fused CPU kernel refuses one that may need a gradient).
    Forward-mode AD (``torch.func.jvp``, ``jacfwd``, ``hessian``) and double backward
    (``create_graph=True`` then a backward through the gradient, e.g. a gradient penalty) do
    not go through the fused path (``need_weights=False``, and so :class:`mha.TinyDecoder`):
    PyTorch's fused CPU kernel has no forward-mode derivative and no derivative of its
    backward, and raises ``NotImplementedError`` or ``RuntimeError`` ("derivative for
    ...flash_attention_for_cpu_backward is not implemented"). Take the weights path
    (``need_weights=True``, the same outputs), or run the forward under
    ``torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)``, which gives the
    fused call PyTorch's plain-math kernel (``tests/test_multi_head.py`` checks both).
    ``tests/test_compile.py`` checks all of these against eager outputs, as for
    :class:`mha.MultiHeadLatentAttention`, :class:`mha.RotaryMultiHeadAttention` and
    :class:`mha.TinyDecoder`. The argument checks read shapes and dtypes only; the checks that
    read values (the fused path's look for NaN and inf, :func:`mha.apply_rotary`'s range of
    positions, token ids in range, causal :func:`mha.chunked_attention`'s look for NaN that
    lets it skip future blocks) run in eager mode and are skipped when compiled, exported
    or vmapped (:func:`mha.set_debug` switches the first off in eager mode too). What does
    not compile in one graph: :func:`mha.generate` (a Python loop that reads each token;
    compile the model's step instead, as ``benchmarks/compiled_decoding.py`` does),
    :func:`mha.head_importance` and :func:`mha.head_confidence` (they refuse NaN by reading
    it). ``torch.jit.script`` compiles none of ``mha``'s modules: TorchScript does not take
    the argument checks' Python; use ``torch.compile`` or ``torch.export`` instead.

    Raises ``ValueError`` naming the argument for a bad size, flag or ``dropout``, or
    ``num_kv_heads`` not dividing ``num_heads``; :class:`mha.MemoryBudgetError` when the weights
    would exceed the memory budget. A call compiled with ``fullgraph=True`` over the budget
    raises ``torch._dynamo.exc.Unsupported`` quoting that MemoryBudgetError instead (Dynamo
    lets no exception out of a full graph), and each new budget compiles again: see
    :func:`mha.memory_budget`.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        head_dim: int | None = None,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        # bool is an int in Python; MultiHeadAttention(8, True) is a bug, not one head
        embed_dim, num_heads = require_int("embed_dim", embed_dim), require_int(
            "num_heads", num_heads)
        kdim, vdim = require_optional_int("kdim", kdim), require_optional_int("vdim", vdim)
        head_dim = require_optional_int("head_dim", head_dim)
        num_kv_heads = require_optional_int("num_kv_heads", num_kv_heads)
        bias = require_flag("bias", bias)
        dropout = require_probability("dropout", dropout)
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(
                    f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}; "
                    f"pass head_dim to choose the size of each head"
                )
            head_dim = embed_dim // num_heads
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
        inner, kv_inner = num_heads * head_dim, num_kv_heads * head_dim
        numel = inner * (2 * embed_dim + 1) + kv_inner * ((kdim or embed_dim)
                                                           + (vdim or embed_dim) + 2)
        check_allocation("MultiHeadAttention's weights", (numel,), torch.get_default_dtype(),
                         "use a smaller embed_dim or head_dim")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.kdim = kdim or embed_dim
        self.vdim = vdim or embed_dim
        self.dropout = float(dropout)
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        head_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        cache: KVCache | None = None,
        key_padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Shapes: ``query`` ``(B, n_q, embed_dim)``, ``key`` ``(B, n_k, kdim)``,
        ``value`` ``(B, n_k, vdim)``; ``key`` defaults to ``query`` and ``value`` to ``key``.

        - ``mask``: bool (**True = may attend**) or float (added to the scores), broadcastable
          to ``(B, h, n_q, n_k)``; e.g. ``(n_q, n_k)`` for all sequences or ``(B, 1, 1, n_k)``
          for padding. A 2-D mask is always ``(n_q, n_k)``, never ``(B, n_k)``: when
          ``B == n_q`` the two shapes are the same and cannot be told apart, so pass padding
          as ``key_padding_mask`` (or as ``(B, 1, 1, n_k)``). A 3-D mask is refused:
          ``(B, n_q, n_k)`` would line ``B`` up with the heads.
        - ``key_padding_mask``: ``(B, n_k)`` with ``nn.MultiheadAttention``'s meaning, so
          that code written for torch carries over: bool **True = ignore this key** (padding;
          the opposite of ``mask``), or float, added to every query's scores of that key. It
          combines with ``mask`` (a key must be allowed by both). With a ``cache``, ``n_k``
          counts the cached keys too.
        - ``is_causal``: each query sees only keys at or before its position, the queries being
          the last ``n_q`` of the ``n_k`` positions (so new tokens after a cache see the whole
          cache); with ``need_weights=False`` and ``n_q = n_k`` PyTorch's fused causal kernel
          runs, without building a mask.
        - ``head_mask``: gates ``xi`` of shape ``(h,)`` or ``(B, h)`` multiplying each head's
          output before ``W_O`` (Michel et al. 2019); 0 removes a head, and gradients flow
          into float gates.
        - ``need_weights=False`` skips the weights and uses PyTorch's fused
          ``scaled_dot_product_attention``.
        - ``cache``: an :class:`mha.KVCache`, for self-attention only. This call's keys and
          values (of the new tokens) are appended to it, and the queries attend over
          everything it holds: incremental decoding, one token (or a few) at a time, gives
          what recomputing the prefix gives. A call with a cache and a ``key`` or ``value``
          that is not ``query`` itself (cross-attention to an encoder's memory, whose keys
          do not grow) is refused: pass no cache there.

        NaN and inf in the inputs reach the outputs they touch (the rule of
        :func:`mha.attention`: nothing non-finite is hidden; see :func:`mha.set_debug`).

        Returns ``(output (B, n_q, embed_dim), weights (B, h, n_q, n_k) or None)``. The
        weights are each head's attention distribution, before any ``head_mask`` gate.

        Raises ``ValueError`` naming the argument for inputs that are not floating tensors of
        the module's dtype and device, of other shapes (an omitted ``key`` or ``value`` that
        cannot stand for itself is named too), masks that do not broadcast or are 3-D, a
        ``cache`` of another batch or head size, filled by another layer, or with a
        ``key``/``value`` other than ``query``; :class:`mha.MemoryBudgetError` (before
        allocating) when the weights or projections would exceed the memory budget (with
        ``need_weights=False`` too when the inputs hold NaN or inf: the weights are then
        computed in the open). A call that raises leaves ``cache`` as it was.
        """
        self._check_defaults(key, value)
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        is_causal = require_flag("is_causal", is_causal)
        need_weights = require_flag("need_weights", need_weights)
        batch, n_q, _ = query.shape
        if cache is not None and not isinstance(cache, KVCache):
            raise ValueError(f"cache must be an mha.KVCache (or None), got "
                             f"{type(cache).__name__}")
        if cache is not None and (key is not query or value is not query):
            # cross-attention's keys (encoder memory) are the same at every step: appending
            # them again each call would double the cache and the weights' n_k
            raise ValueError("cache is for self-attention only (key and value omitted, or the "
                             "query itself): each call appends the keys of its own new tokens. "
                             "This call's key or value is another tensor (cross-attention?): "
                             "pass no cache; the memory's keys are the same at every step")
        if cache is not None and cache.keys is not None and cache.keys.shape[0] != key.shape[0]:
            raise ValueError(f"cache holds a batch of {cache.keys.shape[0]} sequences, key has "
                             f"{key.shape[0]}: use one cache per batch (a new KVCache, or "
                             f"model.new_caches() for a TinyDecoder)")
        if cache is not None and cache.keys is not None:
            self._check_cache_fits(cache)
        if cache is not None:  # after the sizes: a cache of another shape is named by them
            cache._check_layer(self)
        n_k = key.shape[1] + (len(cache) if cache is not None else 0)
        self._check_projections(query, key)
        if need_weights:
            check_output_allocation("the attention weights", "query", query,
                                    (batch, self.num_heads, n_q, n_k), query.dtype,
                                    lambda: f"pass need_weights=False (fused kernel), or "
                                    f"use fewer than n_q = {n_q} queries and n_k = {n_k} keys")
        if mask is not None:
            self._check_mask(mask, batch, n_q, n_k, n_k - key.shape[1])
        if key_padding_mask is not None:
            mask = self._with_padding(mask, key_padding_mask, batch, n_k, n_k - key.shape[1],
                                      query)
        # every check before the cache grows: a call that raises leaves the cache as it was
        gates = None if head_mask is None else self._gates(head_mask, batch)  # (1|B, h, 1, 1)

        q, k, v = self._project(query, key, value)
        # under vmap with autograd on, PyTorch's fused CPU kernel refuses a float mask that
        # may need a gradient ("not differentiable with respect to argument 'attn_mask'"; a
        # mapped mask does not say whether it does): the weights path computes the same
        explicit = need_weights or (mask is not None and mask.is_floating_point()
                                    and torch.is_grad_enabled() and under_vmap())
        held = () if cache is None or cache.keys is None else (cache.keys, cache.values)
        if not need_weights and self._hides_non_finite(q, k, v, mask, held):
            # the weights are built after all: the budget of need_weights=True, checked
            # before the cache grows
            check_output_allocation(
                "the attention weights (need_weights=False computes them too when the inputs "
                "hold NaN or inf, which the fused kernel would hide)", "query", query,
                (batch, self.num_heads, n_q, n_k), query.dtype,
                lambda: f"remove the NaN or inf, use fewer than n_q = {n_q} queries and "
                f"n_k = {n_k} keys, or take the fused kernel anyway with mha.set_debug(False)")
            explicit = True
        if not explicit:  # before the cache grows, as every check
            self._check_fused_mask(query, mask, is_causal, n_q, n_k)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, n_k, d)
            cache._bind(self)
        dropout = self.dropout if self.training else 0.0
        if explicit:
            heads, weights = self._explicit_attention(q, k, v, mask, is_causal, dropout)
            weights = weights if need_weights else None
        else:
            heads, weights = self._fused_attention(q, k, v, mask, is_causal, dropout), None

        if gates is not None:
            heads = heads * gates
        merged = heads.transpose(1, 2).reshape(batch, n_q, self.num_heads * self.head_dim)
        return self.out_proj(merged), weights

    def _check_cache_fits(self, cache: KVCache) -> None:
        """A cache holds one layer's heads: name ``cache`` (not the keys of this step) when its
        heads or sizes are another layer's."""
        held = (cache.keys.shape[1], cache.keys.shape[-1], cache.values.shape[-1])
        if held != (self.num_kv_heads, self.head_dim, self.head_dim):
            raise ValueError(
                f"cache holds keys {tuple(cache.keys.shape)} and values "
                f"{tuple(cache.values.shape)}, (B, h_kv, n, d): (h_kv, d_k, d_v) = {held}, but "
                f"this layer makes {(self.num_kv_heads, self.head_dim, self.head_dim)}: the "
                f"cache may come from another layer. Give each layer its own KVCache "
                f"(model.new_caches() for a TinyDecoder)")

    def _project(self, query, key, value):
        """Q (B, h, n_q, d), K and V (B, h_kv, n_k, d) from the inputs."""
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return (self._split_heads(q), self._split_heads(k, self.num_kv_heads),
                self._split_heads(v, self.num_kv_heads))

    def _explicit_attention(self, q, k, v, mask, is_causal, dropout):
        """Scores, softmax and weights in the open; K/V heads shared by groups of query heads."""
        batch, n_q = q.shape[0], q.shape[2]
        groups = self.num_heads // self.num_kv_heads
        scale = 1.0 / math.sqrt(self.head_dim)  # the inputs are checked: skip attention()'s checks
        if groups == 1:
            return attend(q, k, v, mask, scale, is_causal, dropout)
        # query head i = g * groups + r reads key/value head g: broadcast instead of copying
        q = q.view(batch, self.num_kv_heads, groups, n_q, self.head_dim)  # (B, h_kv, g, n_q, d)
        k, v = k.unsqueeze(2), v.unsqueeze(2)  # (B, h_kv, 1, n_k, d)
        if mask is not None and mask.dim() == 4:
            mask = mask.unflatten(1, (-1, groups) if mask.shape[1] > 1 else (1, 1))
        heads, weights = attend(q, k, v, mask, scale, is_causal, dropout)
        return (heads.flatten(1, 2),  # (B, h, n_q, d)
                weights.flatten(1, 2))  # (B, h, n_q, n_k)

    def _split_heads(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """(B, n, heads * head_dim) -> (B, heads, n, head_dim); heads defaults to h."""
        batch, n, _ = x.shape
        return x.view(batch, n, heads or self.num_heads, self.head_dim).transpose(1, 2)

    def _check_mask(self, mask: torch.Tensor, batch: int, n_q: int, n_k: int,
                    cached: int = 0) -> None:
        target = torch.Size((batch, self.num_heads, n_q, n_k))
        try:
            require_broadcastable_mask(mask, target)
        except ValueError as error:
            if cached:  # a mask over the new tokens only is the likely mistake
                raise ValueError(f"{error}: with a cache, n_k = {n_k} counts the {cached} "
                                 f"cached keys too, so the mask's last dimension is "
                                 f"{cached} + {n_k - cached} new ones") from None
            if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.shape[0] == batch:
                raise ValueError(f"{error}; a 2-D mask is (n_q, n_k): for a padding mask of "
                                 f"shape (B, n_k) pass key_padding_mask=~mask (torch's "
                                 f"meaning, True = ignore)") from None
            raise
        require_same_device(("the module", self.q_proj.weight), ("mask", mask))
        if mask.dim() == 3:
            # (B, n_q, n_k) would broadcast batch against heads: when B == h > 1 silently
            # wrong, so ask for the unambiguous 4-D form instead
            raise ValueError(
                f"a 3-D mask of shape {tuple(mask.shape)} is ambiguous (batch or heads?): "
                f"use (n_q, n_k) = ({n_q}, {n_k}) for all, or (B, 1, n_q, n_k) = "
                f"({batch}, 1, {n_q}, {n_k}) per sequence"
            )

    def _with_padding(self, mask, key_padding_mask, batch: int, n_k: int, cached: int,
                      query: torch.Tensor) -> torch.Tensor:
        """``mask`` combined with torch's ``key_padding_mask`` (True = ignore), ``(B, 1, 1, n_k)``
        or broadcastable to ``(B, h, n_q, n_k)``; ``n_k`` counts the ``cached`` keys too. A
        combination over the memory budget raises :class:`mha.MemoryBudgetError` before it is
        built."""
        dtype = query.dtype
        require_tensor("key_padding_mask", key_padding_mask, "mask")
        if key_padding_mask.dtype != torch.bool and not key_padding_mask.is_floating_point():
            raise ValueError(f"key_padding_mask must be bool (True = ignore the key, as in "
                             f"nn.MultiheadAttention) or floating (added to the scores), got "
                             f"{key_padding_mask.dtype}")
        if tuple(key_padding_mask.shape) != (batch, n_k):
            with_cache = "" if not cached else (
                f", where n_k = {cached} cached + {n_k - cached} new keys: the mask covers "
                f"every key the queries attend to, the cache's too. Keep one mask for the "
                f"whole sequence and extend it each step, e.g. "
                f"torch.cat([mask_so_far, new_tokens_mask], dim=1)")
            raise ValueError(f"key_padding_mask must have shape (B, n_k) = ({batch}, {n_k}), "
                             f"got {tuple(key_padding_mask.shape)}{with_cache}")
        require_same_device(("the module", self.q_proj.weight),
                            ("key_padding_mask", key_padding_mask))
        padding = key_padding_mask[:, None, None, :]  # (B, 1, 1, n_k)
        if padding.dtype == torch.bool:
            padding = ~padding  # the course's convention: True = may attend
        if mask is None:
            return padding
        both_bool = mask.dtype == torch.bool and padding.dtype == torch.bool
        # a (n_q, n_k) mask and (B, 1, 1, n_k) padding make a (B, 1, n_q, n_k) one: on the
        # weights path no larger than the weights (checked already), on the fused path the
        # largest tensor of the call
        check_output_allocation(
            "the mask combined from mask and key_padding_mask", "query", query,
            torch.broadcast_shapes(mask.shape, padding.shape),
            torch.bool if both_bool else dtype,
            "use fewer queries, keys or sequences, or pass one mask of shape (B, 1, n_q, n_k) "
            "holding both")
        if both_bool:
            return mask & padding
        return additive_mask(mask, dtype)[0] + additive_mask(padding, dtype)[0]

    def _hides_non_finite(self, q, k, v, mask, held=()) -> bool:
        """Whether the fused kernel would hide NaN or inf that :func:`mha.attention` shows (a
        query whose scores are all NaN comes out 0; the causal kernel skips future blocks), so
        that ``need_weights=False`` must compute in the open. ``held``: the cache's keys and
        values, read too. Finding out costs one pass over Q, K and V and a host sync:
        ``mha.set_debug(False)`` turns it off (see there), and it is skipped when compiled."""
        # every tensor read must be readable: under vmap the mask, or the keys and values of
        # a fixed query, may be the mapped ones (tester 46)
        read = (q, k, v, *held, *(() if mask is None else (mask,)))
        if not (get_debug() and all(may_read_values(t) for t in read)):
            return False
        with torch.no_grad():  # a look at the inputs, not part of what is differentiated
            return not all_finite((q, k, v, *held)) or (
                mask is not None and mask.is_floating_point() and bool(mask.isnan().any()))

    def _check_fused_mask(self, query, mask, is_causal: bool, n_q: int, n_k: int) -> None:
        """The fused kernel's causal mask cannot combine with another (or align a cache's
        queries): :meth:`_fused_attention` then builds the mask in full, the broadcast of
        ``mask`` and ``(n_q, n_k)``. Refuse it over the memory budget before it is built."""
        if not is_causal or (mask is None and n_q == n_k):
            return
        shape = (n_q, n_k) if mask is None else torch.broadcast_shapes(mask.shape, (n_q, n_k))
        # a float mask is combined in its own dtype, then converted to the query's
        dtype = torch.bool if mask is None or mask.dtype == torch.bool else max(
            mask.dtype, query.dtype, key=lambda t: t.itemsize)
        check_output_allocation(
            "the causal mask the fused kernel takes (is_causal=True with a mask, a "
            "key_padding_mask or a cache builds it in full)", "query", query, shape, dtype,
            lambda: f"use fewer than n_q = {n_q} queries and n_k = {n_k} keys, or pass no "
            f"mask (is_causal alone, without a cache, needs none)")

    def _fused_attention(self, q, k, v, mask, is_causal, dropout):
        n_q, n_k = q.shape[2], k.shape[2]
        gqa = self.num_kv_heads != self.num_heads
        if mask is not None and mask.dim() < 2:
            # the fused kernel indexes the mask's last two dimensions: a (n_k,) mask, which
            # broadcasts on the weights path, becomes a stride-0 (n_q, n_k) view
            mask = mask.expand(n_q, n_k)
        if is_causal and (mask is not None or n_q != n_k):
            # the fused kernel's own causal mask is top-left aligned: build ours instead
            allowed = causal_mask(n_q, n_k, q.device)
            mask = allowed if mask is None else combine_masks(mask, allowed)
            is_causal = False
        float_mask = mask is not None and mask.is_floating_point()
        if float_mask:
            mask = mask.to(q.dtype)  # the fused kernel wants the mask in the query's dtype
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                             is_causal=is_causal, enable_gqa=gqa)
        if float_mask:
            # a query whose float-mask row is all -inf came out NaN before PyTorch 2.5 (2.5's
            # _safe_softmax gives zeros); the rule is zeros, whatever the version. Tensor ops
            # only (no branch on values), so compiled and vmapped code does the same.
            has_key = additive_mask(mask, out.dtype)[1]  # mask-sized, not score-sized
            out = out.masked_fill(~has_key, 0.0)
        return out

    def _check_projections(self, query: torch.Tensor, key: torch.Tensor) -> None:
        """Q, K, V and the heads' output are ``(B, n, h * d)``: refuse them over the budget
        (a stride-0 ``expand`` of a small input costs nothing, its projections do)."""
        batch, n_q, n_k = query.shape[0], query.shape[1], key.shape[1]
        check_output_allocation("the queries of MultiHeadAttention", "query", query,
                                (batch, n_q, max(self.num_heads * self.head_dim,
                                                 self.embed_dim)), query.dtype,
                                "use shorter sequences or smaller batches")
        check_output_allocation("the keys of MultiHeadAttention", "key", key,
                                (batch, n_k, self.num_kv_heads * self.head_dim), key.dtype,
                                "use shorter sequences or smaller batches")

    def _gates(self, head_mask: torch.Tensor, batch: int) -> torch.Tensor:
        weight = self.out_proj.weight
        return require_head_mask(head_mask, self.num_heads, batch, weight.dtype, weight.device)

    def _check_defaults(self, key, value) -> None:
        """An omitted ``key`` is ``query`` and an omitted ``value`` is ``key``: say so when the
        module's sizes cannot take that, rather than blame the tensor that was passed."""
        if key is None and self.kdim != self.embed_dim:
            raise ValueError(f"key is omitted, so it defaults to query ({self.embed_dim} "
                             f"features), but this module has kdim={self.kdim}: pass key")
        if value is None and (self.vdim != self.kdim if key is not None
                              else self.vdim != self.embed_dim):
            source = "key" if key is not None else "query"
            size = self.kdim if key is not None else self.embed_dim
            raise ValueError(f"value is omitted, so it defaults to {source} ({size} "
                             f"features), but this module has vdim={self.vdim}: pass value")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # torch's own message would list missing and unexpected keys without saying why
        if any(f"{prefix}{name}" in state_dict for name in
               ("in_proj_weight", "q_proj_weight", "in_proj_bias")):
            raise ValueError(f"state_dict holds nn.MultiheadAttention's parameters "
                             f"({prefix}in_proj_weight ...), laid out differently: convert the "
                             f"module itself with mha.MultiHeadAttention.from_torch(module)")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _check_inputs(self, query, key, value) -> None:
        for name, x, size in [("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)]:
            require_float_tensor(name, x)
            if x.dim() != 3 or x.shape[-1] != size:
                raise ValueError(
                    f"{name} must have shape (batch, tokens, {size}), got {tuple(x.shape)}"
                )
        require_module_dtype("query", query, self)
        require_module_device("query", query, self)
        require_same_dtype(("query", query), ("key", key), ("value", value))
        require_same_device(("query", query), ("key", key), ("value", value))
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value need the same batch size: {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value need the same number of tokens: key {tuple(key.shape)}, "
                f"value {tuple(value.shape)}"
            )

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``module``'s weights in the course's layout.

        The copy computes the same outputs and per-head weights. Note two conventions that
        differ: this module is always batch first (transpose the inputs of a module built with
        ``batch_first=False``), and its bool masks mean True = may attend, where
        ``nn.MultiheadAttention``'s ``key_padding_mask`` and bool ``attn_mask`` mean True = do
        not attend (pass ``~mask``; or pass torch's padding mask as ``key_padding_mask``,
        which keeps torch's meaning). Its dropout probability and its train/eval mode are
        copied too, and so is each parameter's ``requires_grad`` (torch's packed
        ``in_proj_weight`` and ``in_proj_bias`` give theirs to each of Q, K and V), so a frozen
        weight stays frozen. :meth:`to_torch` goes back. Weights are copied as they are, NaN
        included (the outputs then follow :func:`mha.attention`'s rule: nothing non-finite is
        hidden).

        Raises ``ValueError`` when ``module`` is not a plain ``nn.MultiheadAttention`` or uses
        ``add_bias_kv``/``add_zero_attn``.
        """
        if type(module) is not nn.MultiheadAttention:
            raise ValueError(f"module must be a plain nn.MultiheadAttention, got "
                             f"{type(module).__name__}")
        if cls is not MultiHeadAttention:
            raise ValueError(f"from_torch builds a plain MultiHeadAttention: call "
                             f"mha.MultiHeadAttention.from_torch, not {cls.__name__}.from_torch")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported")
        bias = module.in_proj_bias is not None
        ours = cls(module.embed_dim, module.num_heads, kdim=module.kdim, vdim=module.vdim,
                   bias=bias, dropout=module.dropout).train(module.training)
        ours.to(device=module.out_proj.weight.device, dtype=module.out_proj.weight.dtype)
        if module._qkv_same_embed_dim:
            w_q, w_k, w_v = module.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        with torch.no_grad():
            for proj, w in [(ours.q_proj, w_q), (ours.k_proj, w_k), (ours.v_proj, w_v)]:
                proj.weight.copy_(w)
            ours.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                for proj, b in zip([ours.q_proj, ours.k_proj, ours.v_proj],
                                   module.in_proj_bias.chunk(3), strict=True):
                    proj.bias.copy_(b)
                ours.out_proj.bias.copy_(module.out_proj.bias)
        # a frozen weight stays frozen (the chunks of a packed weight: read the parameter)
        sources = [module.in_proj_weight] * 3 if module._qkv_same_embed_dim else [w_q, w_k, w_v]
        for proj, w in zip([ours.q_proj, ours.k_proj, ours.v_proj, ours.out_proj],
                           [*sources, module.out_proj.weight], strict=True):
            proj.weight.requires_grad_(w.requires_grad)
        if bias:
            for proj in (ours.q_proj, ours.k_proj, ours.v_proj):
                proj.bias.requires_grad_(module.in_proj_bias.requires_grad)
            ours.out_proj.bias.requires_grad_(module.out_proj.bias.requires_grad)
        return ours

    def to_torch(self) -> nn.MultiheadAttention:
        """A copy of this module as an ``nn.MultiheadAttention(..., batch_first=True)``.

        The inverse of :meth:`from_torch`: same weights (bit for bit), dropout probability,
        train/eval mode, dtype and device, so ``MultiHeadAttention.from_torch(m.to_torch())``
        equals ``m``. Each parameter keeps its ``requires_grad``, save that torch packs the
        biases of Q, K and V into ``in_proj_bias`` (and their weights into ``in_proj_weight``
        when ``kdim = vdim = embed_dim``): one parameter, which trains when any of the three
        does, with a warning (freeze all three to keep it frozen). torch's module has no
        grouped-query heads and ties ``head_dim`` to ``embed_dim // num_heads``; anything
        else (or a subclass such as the rotary one) raises ``ValueError``. Remember torch's
        masks mean True = do not attend.

        Raises ``ValueError`` for grouped-query heads, a ``head_dim * num_heads`` other than
        ``embed_dim``, a subclass, or projections that are not the ``nn.Linear`` layers this
        class builds (replaced ones, such as ``GridSelfAttention.attn``'s ``out_proj``; a
        parametrized ``nn.Linear`` of the right size converts, with its effective weight).
        """
        if type(self) is not MultiHeadAttention:
            raise ValueError(f"to_torch converts a plain MultiHeadAttention, not "
                             f"{type(self).__name__}: nn.MultiheadAttention has no "
                             f"equivalent of what the subclass adds")
        if self.num_kv_heads != self.num_heads:
            raise ValueError(f"nn.MultiheadAttention has no grouped-query heads: num_kv_heads="
                             f"{self.num_kv_heads} must equal num_heads={self.num_heads}")
        if self.head_dim * self.num_heads != self.embed_dim:
            raise ValueError(f"nn.MultiheadAttention needs head_dim * num_heads == embed_dim, "
                             f"got head_dim={self.head_dim}, num_heads={self.num_heads}, "
                             f"embed_dim={self.embed_dim}")
        # a replaced out_proj (GridSelfAttention's, embed_dim -> out_channels) would be
        # broadcast by copy_ into torch's (embed_dim, embed_dim) one: a wrong module
        require_built_projections(self, "to_torch (nn.MultiheadAttention holds only these shapes)",
                                  parametrized=True)
        weight = self.out_proj.weight
        bias = self.q_proj.bias is not None
        theirs = nn.MultiheadAttention(self.embed_dim, self.num_heads, dropout=self.dropout,
                                       bias=bias, kdim=self.kdim, vdim=self.vdim,
                                       batch_first=True, device=weight.device,
                                       dtype=weight.dtype).train(self.training)
        with torch.no_grad():
            projections = [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]
            if theirs._qkv_same_embed_dim:
                theirs.in_proj_weight.copy_(torch.cat(projections))  # (3 embed_dim, embed_dim)
            else:
                for name, w in zip(["q_proj_weight", "k_proj_weight", "v_proj_weight"],
                                   projections, strict=True):
                    getattr(theirs, name).copy_(w)
            theirs.out_proj.weight.copy_(self.out_proj.weight)
            if bias:
                theirs.in_proj_bias.copy_(torch.cat([self.q_proj.bias, self.k_proj.bias,
                                                     self.v_proj.bias]))
                theirs.out_proj.bias.copy_(self.out_proj.bias)
        # a frozen weight stays frozen (packed: trainable when any of Q, K, V is)
        projections = [self.q_proj, self.k_proj, self.v_proj]
        packed = [[p.weight for p in projections]] if theirs._qkv_same_embed_dim else []
        packed += [[p.bias for p in projections]] if bias else []
        if any(len({p.requires_grad for p in three}) > 1 for three in packed):
            warnings.warn("to_torch: some of Q, K, V's weights or biases are frozen and some "
                          "not, but nn.MultiheadAttention packs them into one parameter "
                          "(in_proj_weight, in_proj_bias), which trains as a whole: freeze all "
                          "three or none", stacklevel=2)
        if theirs._qkv_same_embed_dim:
            theirs.in_proj_weight.requires_grad_(any(p.weight.requires_grad
                                                     for p in projections))
        else:
            for name, proj in zip(["q_proj_weight", "k_proj_weight", "v_proj_weight"],
                                  projections, strict=True):
                getattr(theirs, name).requires_grad_(proj.weight.requires_grad)
        theirs.out_proj.weight.requires_grad_(self.out_proj.weight.requires_grad)
        if bias:
            theirs.in_proj_bias.requires_grad_(any(p.bias.requires_grad for p in projections))
            theirs.out_proj.bias.requires_grad_(self.out_proj.bias.requires_grad)
        return theirs


def require_built_projections(module: MultiHeadAttention, caller: str, *,
                              parametrized: bool = False) -> None:
    """``module``'s four projections must be the ``nn.Linear`` layers ``MultiHeadAttention``
    builds, of the sizes its attributes say, all with a bias or none: code that rebuilds or
    converts the module (``caller``) reads their weights, and a replaced projection (such as
    ``GridSelfAttention.attn``'s ``out_proj``, ``out_channels`` wide) would be copied wrong
    or fail inside torch. ``parametrized`` also accepts a ``torch.nn.utils.parametrize``d
    ``nn.Linear`` (its ``weight`` reads the effective weight), for callers that read only
    ``weight`` and ``bias``. Raises ``ValueError`` naming ``module``."""
    inner, kv_inner = module.num_heads * module.head_dim, module.num_kv_heads * module.head_dim
    expected = {"q_proj": (module.embed_dim, inner), "k_proj": (module.kdim, kv_inner),
                "v_proj": (module.vdim, kv_inner), "out_proj": (inner, module.embed_dim)}
    biases = set()
    for name, (fan_in, fan_out) in expected.items():
        proj = getattr(module, name)
        plain = type(proj) is nn.Linear or (
            parametrized and is_parametrized(proj) and type(proj).__bases__ == (nn.Linear,))
        weight = getattr(proj, "weight", None)
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
        if not plain or shape != (fan_out, fan_in):
            kind = type(proj).__name__  # ParametrizedLinear when parametrized
            got = kind if shape is None else f"{kind} with a weight of shape {shape}"
            raise ValueError(
                f"module.{name} must be an nn.Linear({fan_in}, {fan_out}) as "
                f"MultiHeadAttention builds it (weight of shape {(fan_out, fan_in)}), got "
                f"{got}: {caller} cannot rebuild a module whose projections were replaced"
                + ("" if parametrized else " or parametrized"))
        biases.add(proj.bias is not None)
    if len(biases) > 1:
        raise ValueError(f"module's projections must all have a bias or none (as bias= "
                         f"builds them): {caller} cannot rebuild a mix")
