"""Checks for the exercises of chapter 9 (multi-head attention in today's decoders)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mha.exercises import Wrong, exercise_check, expect_close, seed
from mha.layers.kv_cache import KVCache
from mha.layers.multi_head import MultiHeadAttention


@exercise_check("9.1", reference_names=("mha.KVCache", "mha.kv_cache.KVCache"))
def cache_bytes(answer) -> None:
    """``answer(layers, kv_heads, head_dim, tokens, bytes_per_number)`` -> the KV cache's bytes,
    checked against caches that real layers fill, of sizes the hidden seed picks."""
    gen = torch.Generator().manual_seed(seed(91))
    dtypes = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
    for case, dtype in enumerate(dtypes):
        # the first case has 3 layers and 2 or more key/value heads, so that each slip below
        # gives its own wrong number there
        layers = 3 if case == 0 else int(torch.randint(1, 5, (), generator=gen))
        kv_heads = int(torch.randint(2 if case == 0 else 1, 4, (), generator=gen))
        heads = kv_heads * int(torch.randint(1, 4, (), generator=gen))
        head_dim = 2 ** int(torch.randint(1, 5, (), generator=gen))
        tokens = int(torch.randint(1, 40, (), generator=gen))
        measured = 0
        for _ in range(layers):  # one layer, one cache: fill it as a decoder would
            layer = MultiHeadAttention(heads * head_dim, heads, num_kv_heads=kv_heads,
                                       head_dim=head_dim).to(dtype)
            measured += _filled_cache(layer, tokens, dtype, gen)
        size = torch.empty((), dtype=dtype).element_size()
        # exact comparison: a number of bytes is an int (numpy's integers cross as ints)
        got = answer(layers, kv_heads, head_dim, tokens, size)
        if not isinstance(got, int) or isinstance(got, bool):
            raise Wrong(f"expected an int number of bytes, got {type(got).__name__}")
        if got != measured:
            what = (f"{layers} layers with {kv_heads} key/value heads of {head_dim} features, "
                    f"{tokens} tokens in {dtype} ({size} bytes each)")
            slips = [  # (what the slip gives, what it means), the likeliest first
                (measured // 2, "your formula counts the keys or the values; the cache holds "
                                "both"),
                (measured // layers, "your formula gives one layer's cache; every layer has "
                                     "its own"),
                (measured // size, "your formula counts numbers, not bytes"),
                (measured * 8, "your formula counts bits, not bytes"),
            ]
            for slip, meaning in slips:
                if got == slip and slip != measured:
                    raise Wrong(f"{what}: {meaning}")
            side = "more" if got > measured else "fewer"
            raise Wrong(f"{what}: your formula gives {got} bytes, {side} than the filled "
                        f"caches hold")


def _filled_cache(layer: MultiHeadAttention, tokens: int, dtype, gen) -> int:
    """The bytes a layer's KV cache holds after it has read ``tokens`` tokens."""
    cache = KVCache()
    x = torch.randn(1, tokens, layer.embed_dim, generator=gen).to(dtype)
    with torch.no_grad():
        layer(x, cache=cache, is_causal=True, need_weights=False)
    return cache.nbytes


def _gqa_case(answer, gen: torch.Generator, heads: int, kv_heads: int, n: int = 5,
              batch: int = 2, d: int = 4) -> None:
    q = torch.randn(batch, heads, n, d, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, n, d, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, kv_heads, n, d, generator=gen, dtype=torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    mistakes = [
        ("query head i reads key/value head i % h_kv: k.repeat tiles the whole block of "
         "heads; repeat each head in place (repeat_interleave on the head dimension)",
         _gqa(q, k, v, tiled=True)),
        ("the scores are not divided by sqrt(d)", _gqa(q, k, v, scale=False)),
        ("the softmax runs over the queries (dim -2); each query's weights over the keys "
         "(dim -1) must sum to 1", _gqa(q, k, v, softmax_dim=-2)),
        ("a query sees later keys: the attention must be causal (key j <= query i)",
         _gqa(q, k, v, causal=False)),
    ]
    got = answer(q, k, v)
    # tolerance: 1e-5 (absolute and relative). The inputs are float64; mha.attention, the
    # fused kernel, expand + reshape, or a float32 computation agree to well under 1e-5, and
    # each mistake above changes outputs of size ~1 by order 0.1 or more
    tokens = "1 token" if n == 1 else f"{n} tokens"  # (instructor 47 read "1 tokens")
    expect_close(f"{heads} query heads sharing {kv_heads} key/value heads, {tokens}", got,
                 expected, atol=1e-5, rtol=1e-5, mistakes=mistakes)


# the fused kernels that do the whole exercise in one call (F.scaled_dot_product_attention with
# enable_gqa; nn.MultiheadAttention and nn.TransformerEncoderLayer on their fused paths, as with
# need_weights=False: review 45, F2). nn.MultiheadAttention's default path (its weights
# returned) is matmuls and a softmax, which the exercise allows: review 47
FUSED_ATTENTION_OPS = ("scaled_dot_product", "multi_head_attention", "transformer_encoder_layer")


@exercise_check("9.2", points=0.5, part="groups of 1 to 4 query heads",
                reference_names=("mha.repeat_kv", "mha.kv_sharing.repeat_kv"),
                forbidden_ops=FUSED_ATTENTION_OPS)
def gqa_attention(answer) -> None:
    """``answer(q, k, v)`` with ``q`` ``(B, h, n, d)`` and ``k``, ``v`` ``(B, h_kv, n, d)`` ->
    causal grouped-query attention ``(B, h, n, d)``, checked against PyTorch's fused kernel.
    An answer that runs a fused attention kernel itself is wrong (the exercise asks for the
    heads repeated by hand and ``mha.attention``); ``mha.repeat_kv`` is flagged.

    A wrong answer that matches one of the exercise's common mistakes (``repeat`` for
    ``repeat_interleave``, no ``1/sqrt(d)``, softmax over the queries, no causal mask) is told
    which one."""
    gen = torch.Generator().manual_seed(seed(92))
    for heads, kv_heads in [(8, 2), (4, 1), (6, 3), (4, 4)]:
        _gqa_case(answer, gen, heads, kv_heads)


@gqa_attention.part("one token, a batch of one, groups of 5 and 12", points=0.5, hidden=True)
def _edges(answer) -> None:
    # n = 1 (the first decoding step: the causal mask is one True), B = 1, and group sizes the
    # visible cases do not use (a shape slip that happens to fit 2 or 4 shows here)
    gen = torch.Generator().manual_seed(seed(1092))
    _gqa_case(answer, gen, 4, 2, n=1)
    _gqa_case(answer, gen, 10, 2, batch=1)
    _gqa_case(answer, gen, 12, 1, n=3, d=2)


def _gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, tiled: bool = False,
         scale: bool = True, softmax_dim: int = -1, causal: bool = True) -> torch.Tensor:
    """Grouped-query attention written out, with one of the common mistakes switched on."""
    groups = q.shape[1] // k.shape[1]
    if tiled:
        k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)
    else:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / q.shape[-1] ** 0.5
    if causal:
        n = q.shape[-2]
        allowed = torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=softmax_dim) @ v


@exercise_check("9.3", reference_names=("mha.MultiHeadLatentAttention",
                                         "mha.latent_attention.MultiHeadLatentAttention"))
def absorb_query(answer) -> None:
    """``answer(q, w_uk)`` with ``q`` ``(B, h, n, d_h)`` and ``w_uk`` ``(h, d_h, d_c)`` ->
    latent queries ``(B, h, n, d_c)`` whose dot products with the latents are the scores."""
    gen = torch.Generator().manual_seed(seed(93))
    for heads, d_h, d_c in [(4, 8, 12), (2, 3, 5), (3, 6, 6)]:
        q = torch.randn(2, heads, 4, d_h, generator=gen, dtype=torch.float64)
        w_uk = torch.randn(heads, d_h, d_c, generator=gen, dtype=torch.float64)
        latents = torch.randn(2, 7, d_c, generator=gen, dtype=torch.float64)
        # the reference decompresses: k_{j,i} = W_UK,i c_j, then q . k
        keys = torch.einsum("hdc,bjc->bhjd", w_uk, latents)
        scores = q @ keys.transpose(-2, -1)  # (B, h, n, 7)
        got = answer(q, w_uk)
        if not isinstance(got, torch.Tensor) or got.shape != (2, heads, 4, d_c):
            raise Wrong(f"expected latent queries of shape (2, {heads}, 4, {d_c}), got "
                        f"{tuple(getattr(got, 'shape', ())) or type(got).__name__}")
        # tolerance: 1e-5 (absolute and relative) on the scores, which the check computes
        # from the answer in float64: einsum or matmul, in float64 or float32, agree to well
        # under it; a transposed W_UK or a missing head differs by order 1
        expect_close(f"the scores of the absorbed queries against the latents (h = {heads}, "
                     f"d_h = {d_h}, d_c = {d_c})",
                     got.detach().double() @ latents[:, None].transpose(-2, -1), scores,
                     atol=1e-5, rtol=1e-5)


@exercise_check("9.5", reference_names=("mha.pool_kv_heads", "mha.kv_sharing.pool_kv_heads"))
def mean_pool_kv(answer) -> None:
    """``answer(weight, num_heads, num_kv_heads)`` with a key or value projection ``weight``
    ``(num_heads * d, d_in)`` -> the mean-pooled ``(num_kv_heads * d, d_in)``."""
    gen = torch.Generator().manual_seed(seed(95))
    for heads, kv_heads, d, d_in in [(8, 2, 4, 16), (4, 1, 3, 5), (6, 3, 2, 7), (4, 4, 2, 3)]:
        weight = torch.randn(heads * d, d_in, generator=gen, dtype=torch.float64)
        group = heads // kv_heads
        expected = torch.stack([
            sum(weight[(g * group + j) * d:(g * group + j + 1) * d] for j in range(group)) / group
            for g in range(kv_heads)]).reshape(kv_heads * d, d_in)
        got = answer(weight, heads, kv_heads)
        # tolerance: 1e-6 (absolute and relative): a mean of up to 4 float64 rows is exact to
        # ~1e-16 in any order, a float32 one to ~1e-7; pooling the wrong rows differs by ~1
        expect_close(f"{heads} heads of size {d} pooled into {kv_heads}", got, expected,
                     atol=1e-6, rtol=1e-6)
