"""The chapter-9 exercise checks accept the reference solutions and reject wrong answers."""

import torch

import mha
import mha.checks.ch09 as ch09


def not_done(*args):
    raise NotImplementedError()


def test_cache_bytes():
    def right(layers, kv_heads, head_dim, tokens, size):
        return 2 * layers * kv_heads * head_dim * tokens * size

    assert ch09.cache_bytes(right).status == "correct"
    assert ch09.cache_bytes(lambda L, kv, d, n, s: L * kv * d * n * s).status == "wrong"  # no 2
    assert ch09.cache_bytes(lambda L, kv, d, n, s: float(right(L, kv, d, n, s))).status == "wrong"
    assert ch09.cache_bytes(not_done).status == "not done"


def test_gqa_attention():
    def right(q, k, v):
        groups = q.shape[1] // k.shape[1]
        n = q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        return mha.attention(q, mha.repeat_kv(k, groups), mha.repeat_kv(v, groups), mask)[0]

    def tiled(q, k, v):  # repeat the whole block of heads: head i reads kv head i % h_kv
        groups = q.shape[1] // k.shape[1]
        mask = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).tril()
        return mha.attention(q, k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1), mask)[0]

    def not_causal(q, k, v):
        groups = q.shape[1] // k.shape[1]
        return mha.attention(q, mha.repeat_kv(k, groups), mha.repeat_kv(v, groups))[0]

    assert ch09.gqa_attention(right).status == "correct"
    assert ch09.gqa_attention(tiled).status == "wrong"
    assert ch09.gqa_attention(not_causal).status == "wrong"
    assert ch09.gqa_attention(not_done).status == "not done"


def test_absorb_query():
    def right(q, w_uk):
        return torch.einsum("bhnd,hdc->bhnc", q, w_uk)

    def forgot_per_head(q, w_uk):  # one matrix for all heads
        return torch.einsum("bhnd,dc->bhnc", q, w_uk[0])

    assert ch09.absorb_query(right).status == "correct"
    assert ch09.absorb_query(forgot_per_head).status == "wrong"
    assert ch09.absorb_query(lambda q, w: q).status in ("wrong", "error")
    assert ch09.absorb_query(not_done).status == "not done"


def test_mean_pool_kv():
    def right(weight, heads, kv_heads):
        d = weight.shape[0] // heads
        return weight.view(kv_heads, heads // kv_heads, d, -1).mean(1).reshape(kv_heads * d, -1)

    def keeps_first_head(weight, heads, kv_heads):
        d = weight.shape[0] // heads
        return weight.view(kv_heads, heads // kv_heads, d, -1)[:, 0].reshape(kv_heads * d, -1)

    def pools_strided(weight, heads, kv_heads):  # groups heads i, i + h_kv, ...: wrong grouping
        d = weight.shape[0] // heads
        return weight.view(heads // kv_heads, kv_heads, d, -1).mean(0).reshape(kv_heads * d, -1)

    assert ch09.mean_pool_kv(right).status == "correct"
    assert ch09.mean_pool_kv(keeps_first_head).status == "wrong"
    assert ch09.mean_pool_kv(pools_strided).status == "wrong"
    assert ch09.mean_pool_kv(not_done).status == "not done"
