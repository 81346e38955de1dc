"""Multi-head latent attention (DeepSeek-V2, 2024): keys and values from one small shared latent.

Every token is compressed to a latent ``c = h W_DKV`` of ``latent_dim`` features; each head's
key and value are read out of it, ``k_i = c W_UK,i`` and ``v_i = c W_UV,i``. Only ``c`` has to
be cached, plus one small rotary key shared by all heads (the "decoupled" RoPE part, which
carries the positions). Because ``q_i . (c W_UK,i) = (q_i W_UK,i^T) . c``, inference can fold
``W_UK,i`` into the query ("absorb" it) and attend over the cached latents directly, never
decompressing a key.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    refuse_autograd_history,
    refuse_vmap_leftovers,
    require_base,
    require_cached_dtype,
    require_flag,
    require_float_tensor,
    require_head_mask,
    require_int,
    require_module_device,
    require_module_dtype,
    require_optional_int,
    require_same_device,
    require_same_dtype,
)
from mha.layers.kv_cache import LayerBound
from mha.layers.rotary import apply_rotary


class LatentCache(LayerBound):
    """What one MLA layer caches per token: the latent ``c`` and the shared rotary key.

    ``latents``: ``(B, n, latent_dim)``; ``rope_keys``: ``(B, 1, n, rope_dim)`` (one head,
    shared by all query heads), floating, of one dtype, or None while empty. ``len(cache)`` is
    ``n``. Make one with :meth:`MultiHeadLatentAttention.new_cache`.

    As :class:`mha.KVCache`: ``copy.deepcopy`` refuses a cache holding autograd history (fill
    it under ``torch.no_grad()``), and a cache filled inside ``torch.func.vmap`` is refused
    outside it (it holds vmap's batched tensors), and the first layer that fills it owns it:
    another layer refuses it (:class:`mha.kv_cache.LayerBound`).

    Raises nothing itself when made; :meth:`append` and ``copy.deepcopy`` raise ``ValueError``.
    """

    def __init__(self) -> None:
        self.latents: torch.Tensor | None = None
        self.rope_keys: torch.Tensor | None = None

    def __len__(self) -> int:
        """The number of tokens cached."""
        return 0 if self.latents is None else self.latents.shape[1]

    def _filled(self) -> bool:
        return self.latents is not None

    def __deepcopy__(self, memo: dict) -> LatentCache:
        """A copy with cloned tensors; refused while they carry autograd history."""
        refuse_autograd_history("LatentCache", (self.latents, self.rope_keys), "latents",
                                "rope_keys")
        copy = LatentCache()
        copy.latents, copy.rope_keys = (None if t is None else t.clone()
                                        for t in (self.latents, self.rope_keys))
        self._copy_binding(copy, memo)
        return copy

    def append(
        self, latents: torch.Tensor, rope_keys: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``(B, n_new, latent_dim)`` latents and ``(B, 1, n_new, rope_dim)`` rotary keys;
        return everything cached so far. NaN or inf values are stored as given: like any
        attention input they reach the outputs that read them (see :func:`mha.attention`).

        Raises ``ValueError`` naming ``latents`` or ``rope_keys`` for tensors that are not
        3-D and 4-D floating, of different dtypes or devices, or whose shapes do not fit each
        other or the cache, or when the cache was filled inside ``torch.func.vmap`` and is
        used outside it (nothing is added then); :class:`mha.MemoryBudgetError` when the
        cache would exceed the budget."""
        require_float_tensor("latents", latents, dim=3)
        require_float_tensor("rope_keys", rope_keys, dim=4)
        refuse_vmap_leftovers("LatentCache", self.latents, latents, "latents and rope_keys")
        require_same_dtype(("latents", latents), ("rope_keys", rope_keys))
        if self.latents is not None:
            require_cached_dtype(("latents", "rope_keys"), self.latents, latents,
                                 fresh="layer.new_cache()")
        require_same_device(("latents", latents), ("rope_keys", rope_keys))
        batch, n_new = latents.shape[:2]
        if rope_keys.shape[:3] != (batch, 1, n_new):
            raise ValueError(f"rope_keys must have shape (B, 1, n_new, rope_dim) = ({batch}, 1, "
                             f"{n_new}, ·) to match latents {tuple(latents.shape)}, got "
                             f"{tuple(rope_keys.shape)}")
        if self.latents is not None:
            cached = (self.latents.shape[0], self.latents.shape[2], self.rope_keys.shape[3])
            if (batch, latents.shape[2], rope_keys.shape[3]) != cached:
                raise ValueError(
                    f"new latents {tuple(latents.shape)} and rope_keys "
                    f"{tuple(rope_keys.shape)} do not fit this cache (batch {cached[0]}, "
                    f"latent_dim {cached[1]}, rope_dim {cached[2]}): use one cache per "
                    f"layer and per batch (model.new_caches())")
            require_same_device(("latents", latents), ("the cached latents", self.latents))
        check_allocation("the latent cache", (batch, len(self) + n_new,
                         latents.shape[2] + rope_keys.shape[3]), latents.dtype,
                         lambda: f"use shorter sequences (the cache holds {len(self)} tokens, "
                         f"latents adds {n_new}) or a smaller batch ({batch})")
        if self.latents is None:
            # contiguous like every later torch.cat: a compiled step then sees one layout
            self.latents, self.rope_keys = latents.contiguous(), rope_keys.contiguous()
        else:
            self.latents = torch.cat([self.latents, latents], dim=1)  # (B, n + n_new, d_c)
            self.rope_keys = torch.cat([self.rope_keys, rope_keys], dim=2)  # (B, 1, n + n_new, r)
        if not torch.compiler.is_compiling():
            # the length grows at every step: a compiled step traces it as a symbol from its
            # first call instead of compiling once per length (hints only, nothing is copied)
            torch._dynamo.maybe_mark_dynamic(self.latents, 1)
            torch._dynamo.maybe_mark_dynamic(self.rope_keys, 2)
        return self.latents, self.rope_keys

    @property
    def nbytes(self) -> int:
        """Bytes held: ``batch * n * (latent_dim + rope_dim) * element size``.

        Raises nothing."""
        if self.latents is None:
            return 0
        return self.latents.nbytes + self.rope_keys.nbytes


class MultiHeadLatentAttention(nn.Module):
    r"""Causal multi-head latent attention (DeepSeek-V2, section 2.1), batch first.

    For token ``t`` with input ``x_t`` (``embed_dim``) and head ``i`` (``head_dim = d_h``):

    - latent ``c_t = RMSNorm(x_t W_DKV)`` (``latent_dim = d_c``); ``k^C_{t,i} = c_t W_UK,i``,
      ``v_{t,i} = c_t W_UV,i`` (``d_h`` each);
    - queries ``q^C_{t,i} = x_t W_Q,i`` (``d_h``) and ``q^R_{t,i} = RoPE(x_t W_QR,i)``,
      one shared rotary key ``k^R_t = RoPE(x_t W_KR)`` (``rope_dim = d_h^R``);
    - ``o_{t,i} = sum_{j <= t} softmax_j([q^C; q^R] . [k^C_{j,i}; k^R_j] / sqrt(d_h + d_h^R))
      v_{j,i}`` and the output ``[o_{t,1}, ..., o_{t,h}] W_O``.

    The cache holds ``c_t`` and ``k^R_t``: ``d_c + d_h^R`` numbers per token and layer, against
    ``2 h d_h`` for multi-head attention. (DeepSeek-V2 also compresses the queries, to save
    activation memory in training; that does not touch the cache and is left out here.)
    No biases, as in DeepSeek-V2. The RMS normalisation of the latent is in DeepSeek's code
    (``kv_a_layernorm``), not in the paper's equations; it acts before anything is cached, so
    the cache and the absorption are unchanged by it.

    Args:
        embed_dim: width of the input and output.
        num_heads: number of query heads h.
        latent_dim: d_c, the size of the cached latent.
        rope_dim: d_h^R, the size of the decoupled rotary query and key (even).
        head_dim: d_h; defaults to ``embed_dim // num_heads``.
        base: the rotary base.

    ``torch.compile(fullgraph=True)`` traces it in one graph (``dynamic=True``: one for every
    length; a growing :class:`LatentCache` compiles once when the prompt runs eagerly), and
    ``torch.export`` takes a dynamic length (see :class:`mha.MultiHeadAttention`).

    Raises ``ValueError`` naming the argument for a bad size or ``base``, an odd ``rope_dim``,
    or ``embed_dim`` not divisible by ``num_heads`` without ``head_dim``;
    :class:`mha.MemoryBudgetError` when the weights would exceed the memory budget.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        latent_dim: int,
        rope_dim: int,
        head_dim: int | None = None,
        base: float = 10000.0,
    ) -> None:
        super().__init__()
        embed_dim, num_heads = require_int("embed_dim", embed_dim), require_int("num_heads",
                                                                                num_heads)
        latent_dim, rope_dim = require_int("latent_dim", latent_dim), require_int("rope_dim",
                                                                                 rope_dim)
        head_dim = require_optional_int("head_dim", head_dim)
        base = require_base(base)  # at construction, not at the first forward
        if rope_dim % 2:
            raise ValueError(f"rope_dim must be even (RoPE rotates pairs), got {rope_dim}")
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(f"embed_dim={embed_dim} is not divisible by "
                                 f"num_heads={num_heads}; pass head_dim")
            head_dim = embed_dim // num_heads
        inner = num_heads * head_dim
        numel = (embed_dim * latent_dim + latent_dim + 2 * latent_dim * inner
                 + embed_dim * (inner + num_heads * rope_dim + rope_dim) + inner * embed_dim)
        check_allocation("MultiHeadLatentAttention's weights", (numel,),
                         torch.get_default_dtype(),
                         f"use a smaller embed_dim ({embed_dim}), latent_dim ({latent_dim}), "
                         f"rope_dim ({rope_dim}) or head_dim ({head_dim})")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        self.latent_dim, self.rope_dim, self.base = latent_dim, rope_dim, base
        self.kv_down = nn.Linear(embed_dim, latent_dim, bias=False)  # W_DKV
        self.latent_norm = nn.RMSNorm(latent_dim, eps=1e-6)
        self.k_up = nn.Linear(latent_dim, inner, bias=False)  # W_UK, all heads side by side
        self.v_up = nn.Linear(latent_dim, inner, bias=False)  # W_UV
        self.q_proj = nn.Linear(embed_dim, inner, bias=False)  # W_Q
        self.q_rope = nn.Linear(embed_dim, num_heads * rope_dim, bias=False)  # W_QR
        self.k_rope = nn.Linear(embed_dim, rope_dim, bias=False)  # W_KR, one for all heads
        self.out_proj = nn.Linear(inner, embed_dim, bias=False)  # W_O

    @staticmethod
    def new_cache() -> LatentCache:
        """An empty cache for this layer.

        Raises nothing."""
        return LatentCache()

    def forward(
        self,
        x: torch.Tensor,
        *,
        cache: LatentCache | None = None,
        absorb: bool = False,
        head_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        need_weights: bool = False,
        mask: None = None,
    ) -> tuple[torch.Tensor, None]:
        r"""Causal self-attention on ``x`` ``(B, n, embed_dim)``; returns ``(output, None)``.

        With ``cache``, ``x`` holds the next ``n`` tokens: their latents and rotary keys are
        appended and they attend over everything cached (query ``i`` sits at position
        ``len(cache) + i``). ``absorb=True`` computes the same output without decompressing
        keys or values: each query is multiplied by ``W_UK,i^T`` and attends over the latents
        (one key/value "head" of size ``d_c`` shared by all heads, as in multi-query attention),
        and ``W_UV,i`` is applied after the weighted sum. ``head_mask`` gates heads as in
        :class:`mha.MultiHeadAttention`. ``is_causal`` must be True and ``need_weights``
        False (the arguments exist so a decoder block can call any of the course's layers
        alike). There is no ``mask`` (the argument exists only to say so): every sequence
        attends causally over all its tokens. NaN and inf in ``x`` reach the outputs (the
        rule of :func:`mha.attention`).

        Raises ``ValueError`` naming the argument for ``x`` of another shape, dtype or device,
        a ``cache`` of another batch or sizes, a bad ``head_mask``, ``is_causal=False``,
        ``need_weights=True`` or a ``mask``; :class:`mha.MemoryBudgetError` before an over-budget
        allocation. A call that raises leaves ``cache`` as it was.
        """
        if mask is not None:  # a plain TypeError would not say what the layer takes
            raise ValueError("MultiHeadLatentAttention takes no mask: it is causal "
                             "self-attention over all of x's tokens (and the cache's); it "
                             "takes x, cache, absorb, head_mask, is_causal=True and "
                             "need_weights=False")
        require_float_tensor("x", x)
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (batch, tokens, {self.embed_dim}), "
                             f"got {tuple(x.shape)}")
        require_module_dtype("x", x, self)
        require_module_device("x", x, self)
        absorb = require_flag("absorb", absorb)
        if not require_flag("is_causal", is_causal) or require_flag("need_weights", need_weights):
            raise ValueError("MultiHeadLatentAttention is causal self-attention without "
                             "weights: is_causal must be True and need_weights False")
        if cache is not None and not isinstance(cache, LatentCache):
            raise ValueError(f"cache must be a LatentCache, got {type(cache).__name__}")
        if cache is not None:
            cache._check_layer(self)
        batch, n, _ = x.shape
        h, d, r = self.num_heads, self.head_dim, self.rope_dim
        past = 0 if cache is None else len(cache)
        if cache is not None and past and cache.latents.shape[0] != batch:
            raise ValueError(f"cache holds a batch of {cache.latents.shape[0]} sequences, x has "
                             f"{batch}: use one cache per batch (model.new_caches())")
        weight = self.out_proj.weight
        gates = None if head_mask is None else require_head_mask(
            head_mask, h, batch, weight.dtype, weight.device)  # (1 or B, h, 1, 1)
        # the keys (or latents) every head reads, and the mask: the largest tensors made here
        width = self.latent_dim + r if absorb else d + r
        check_output_allocation("the keys of MultiHeadLatentAttention", "x", x,
                                (batch, h, past + n, width), x.dtype,
                                lambda: f"use shorter sequences (x has {n} tokens, the cache "
                                f"{past}) or smaller batches")
        check_output_allocation("MultiHeadLatentAttention's causal mask", "x", x,
                                (n, past + n), torch.bool, "use shorter sequences")
        positions = torch.arange(past, past + n, device=x.device)

        latents = self.latent_norm(self.kv_down(x))  # (B, n, d_c)
        rope_keys = apply_rotary(self.k_rope(x)[:, None], positions, self.base)  # (B, 1, n, r)
        if cache is not None:
            latents, rope_keys = cache.append(latents, rope_keys)
            cache._bind(self)
        n_k = latents.shape[1]
        q = self.q_proj(x).view(batch, n, h, d).transpose(1, 2)  # (B, h, n, d_h)
        q_rope = self.q_rope(x).view(batch, n, h, r).transpose(1, 2)  # (B, h, n, r)
        q_rope = apply_rotary(q_rope, positions, self.base)
        # query i (at position past + i) sees keys 0 .. past + i
        mask = torch.ones(n, n_k, dtype=torch.bool, device=x.device).tril(diagonal=n_k - n)
        scale = 1.0 / math.sqrt(d + r)

        if absorb:
            w_uk = self.k_up.weight.view(h, d, self.latent_dim)  # (h, d_h, d_c)
            w_uv = self.v_up.weight.view(h, d, self.latent_dim)  # (h, d_h, d_c)
            q_latent = torch.einsum("bhnd,hdc->bhnc", q, w_uk)  # (B, h, n, d_c) = q W_UK^T
            queries = torch.cat([q_latent, q_rope], dim=-1)  # (B, h, n, d_c + r)
            keys = torch.cat([latents[:, None], rope_keys], dim=-1)  # (B, 1, n_k, d_c + r)
            mixed = F.scaled_dot_product_attention(
                queries, keys.expand(batch, h, n_k, -1),
                latents[:, None].expand(batch, h, n_k, -1), attn_mask=mask, scale=scale,
            )  # (B, h, n, d_c): weighted sums of latents
            heads = torch.einsum("bhnc,hdc->bhnd", mixed, w_uv)  # (B, h, n, d_h)
        else:
            k = self.k_up(latents).view(batch, n_k, h, d).transpose(1, 2)  # (B, h, n_k, d_h)
            v = self.v_up(latents).view(batch, n_k, h, d).transpose(1, 2)  # (B, h, n_k, d_h)
            queries = torch.cat([q, q_rope], dim=-1)  # (B, h, n, d_h + r)
            keys = torch.cat([k, rope_keys.expand(batch, h, n_k, r)], dim=-1)
            heads = F.scaled_dot_product_attention(queries, keys, v, attn_mask=mask,
                                                   scale=scale)  # (B, h, n, d_h)

        if gates is not None:
            heads = heads * gates
        merged = heads.transpose(1, 2).reshape(batch, n, h * d)  # (B, n, h d_h)
        return self.out_proj(merged), None

    def cache_numbers_per_token(self) -> int:
        """Numbers this layer caches per token: ``latent_dim + rope_dim``.

        Raises nothing."""
        return self.latent_dim + self.rope_dim
