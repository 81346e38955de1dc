"""The chapter-9 exercise checks accept the reference solutions and reject wrong answers."""

import math

import pytest
import torch

import mha
import mha.checks.ch09 as ch09

pytestmark = pytest.mark.chapter(9)  # make chapter CHAPTER=09 runs these


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


@pytest.mark.parametrize("fused", ["sdpa", "nn.MultiheadAttention"])
def test_gqa_attention_counts_a_fused_kernel_wrong(fused):
    """Review 45, F2: the exercise asks for the heads repeated by hand and ``mha.attention``;
    one call of the fused kernel with ``enable_gqa=True`` (the chapter's reference) scored full
    marks. Its output is right, so only the watch on the answer's ops can tell."""
    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)

    def torch_layer(q, k, v):  # the fused op inside torch's own layer, with identity weights
        b, h, n, d = q.shape
        layer = torch.nn.MultiheadAttention(h * d, h, bias=False, batch_first=True).double()
        with torch.no_grad():
            layer.in_proj_weight.copy_(torch.eye(h * d).repeat(3, 1))
            layer.out_proj.weight.copy_(torch.eye(h * d))
        groups = h // k.shape[1]
        flat = [t.transpose(1, 2).reshape(b, n, h * d)
                for t in (q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))]
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)
        out = layer(*flat, attn_mask=causal, need_weights=False)[0]
        return out.reshape(b, n, h, d).transpose(1, 2)

    result = ch09.gqa_attention(sdpa if fused == "sdpa" else torch_layer)
    assert result.status == "wrong", result
    assert "forbids what your answer ran" in result.message, result.message
    if fused == "sdpa":
        assert "torch.nn.functional.scaled_dot_product_attention" in result.message
    assert ch09.gqa_attention(written_out).status == "correct"  # repeated by hand: allowed


def written_out(q, k, v, *, tile=False, scale=True, softmax_dim=-1, causal=True):
    """A student's grouped-query attention, with one slip switched on."""
    groups = q.shape[1] // k.shape[1]
    if tile:
        k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)
    else:
        k, v = mha.repeat_kv(k, groups), mha.repeat_kv(v, groups)
    scores = torch.einsum("bhid,bhjd->bhij", q, k)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", scores.softmax(dim=softmax_dim), v)


@pytest.mark.parametrize("slip,words", [
    ({"tile": True}, "repeat_interleave"),
    ({"scale": False}, "not divided by sqrt(d)"),
    ({"softmax_dim": -2}, "softmax runs over the queries"),
    ({"causal": False}, "must be causal"),
])
def test_gqa_attention_names_each_common_mistake(slip, words):
    assert ch09.gqa_attention(written_out).status == "correct"  # the same code without the slip
    result = ch09.gqa_attention(lambda q, k, v: written_out(q, k, v, **slip))
    assert result.status == "wrong" and words in result.message, result.message
    others = ["repeat_interleave", "not divided", "over the queries", "must be causal"]
    assert sum(w in result.message for w in others) == 1  # one diagnosis, the right one


@pytest.mark.parametrize("slip,words", [
    (lambda L, kv, d, n, s: L * kv * d * n * s, "keys or the values"),
    (lambda L, kv, d, n, s: 2 * kv * d * n * s, "one layer's cache"),
    (lambda L, kv, d, n, s: 2 * L * kv * d * n, "numbers, not bytes"),
    (lambda L, kv, d, n, s: 2 * L * kv * d * n * s + 1, "more than the filled caches hold"),
])
def test_cache_bytes_names_the_slip_without_the_answer(slip, words):
    result = ch09.cache_bytes(slip)
    assert result.status == "wrong" and words in result.message, result.message


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
