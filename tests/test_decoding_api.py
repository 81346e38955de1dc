"""MultiHeadAttention for decoders: causal attention, grouped-query heads, the KV cache, dropout.

Each property is checked against an independent reference: PyTorch's
``scaled_dot_product_attention`` (with ``enable_gqa``), an explicit float64 computation with
repeated key/value heads, or recomputing the whole prefix.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mha

pytestmark = pytest.mark.chapter(9)  # make chapter runs this file (issue 38)


def layer(h=4, h_kv=2, d=16, seed=0, **kwargs):
    torch.manual_seed(seed)
    return mha.MultiHeadAttention(d, h, num_kv_heads=h_kv, **kwargs).double()


def reference(module, x, mask=None):
    """Grouped-query attention written out: repeat each key/value head for its query heads."""
    b, n, _ = x.shape
    h, h_kv, d = module.num_heads, module.num_kv_heads, module.head_dim
    q = module.q_proj(x).view(b, n, h, d).transpose(1, 2)
    k = module.k_proj(x).view(b, n, h_kv, d).transpose(1, 2).repeat_interleave(h // h_kv, dim=1)
    v = module.v_proj(x).view(b, n, h_kv, d).transpose(1, 2).repeat_interleave(h // h_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, n, h * d)
    return module.out_proj(out), weights


MASKS = {
    "none": lambda b, h, n: None,
    "shared (n, n)": lambda b, h, n: torch.rand(n, n) < 0.7,
    "per sequence (B, 1, n, n)": lambda b, h, n: torch.rand(b, 1, n, n) < 0.7,
    "per head (1, h, n, n)": lambda b, h, n: torch.rand(1, h, n, n) < 0.7,
    "padding (B, 1, 1, n)": lambda b, h, n: torch.rand(b, 1, 1, n) < 0.7,
}


def fix_empty_rows(mask, n):
    """Let every query see itself, so that no row is fully masked (the reference would be NaN)."""
    return None if mask is None else mask | torch.eye(n, dtype=torch.bool)


@pytest.mark.parametrize("h, h_kv", [(4, 4), (4, 2), (4, 1), (6, 3), (8, 2)])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_grouped_query_attention_equals_repeated_heads_and_sdpa_enable_gqa(h, h_kv, mask_kind):
    module = layer(h, h_kv, d=24)
    torch.manual_seed(1)
    x = torch.randn(3, 7, 24, dtype=torch.float64)
    mask = fix_empty_rows(MASKS[mask_kind](3, h, 7), 7)
    expected, expected_weights = reference(module, x, mask)
    out, weights = module(x, mask=mask)
    fast, _ = module(x, mask=mask, need_weights=False)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)
    torch.testing.assert_close(fast, expected, rtol=0, atol=1e-12)
    # and PyTorch's own grouped-query kernel on the same projections
    b, n, d = 3, 7, module.head_dim
    q = module.q_proj(x).view(b, n, h, d).transpose(1, 2)
    k = module.k_proj(x).view(b, n, h_kv, d).transpose(1, 2)
    v = module.v_proj(x).view(b, n, h_kv, d).transpose(1, 2)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, module.out_proj(sdpa.transpose(1, 2).reshape(b, n, h * d)),
                               rtol=0, atol=1e-12)


def test_grouped_query_attention_has_fewer_key_value_parameters():
    full, grouped = layer(8, 8, d=32), layer(8, 2, d=32)
    assert grouped.k_proj.weight.shape == (2 * 4, 32) and grouped.v_proj.weight.shape == (8, 32)
    saved = sum(p.numel() for p in full.parameters()) - sum(p.numel() for p in grouped.parameters())
    assert saved == 2 * (8 - 2) * 4 * (32 + 1)  # K and V lose 6 heads of 4 features (+ bias)


@pytest.mark.parametrize("bad", [3, 0, 5])
def test_num_kv_heads_must_divide_num_heads(bad):
    with pytest.raises(ValueError, match="num_kv_heads"):
        mha.MultiHeadAttention(16, 4, num_kv_heads=bad)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("h_kv", [4, 1])
def test_is_causal_equals_the_lower_triangular_mask(need_weights, h_kv):
    module = layer(4, h_kv)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    tril = torch.ones(9, 9, dtype=torch.bool).tril()
    out, _ = module(x, is_causal=True, need_weights=need_weights)
    expected, _ = reference(module, x, tril)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("need_weights", [True, False])
def test_is_causal_combines_with_a_padding_mask(need_weights):
    module = layer(4, 2)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    out, _ = module(x, mask=padding, is_causal=True, need_weights=need_weights)
    expected, _ = reference(module, x, padding & torch.ones(6, 6, dtype=torch.bool).tril())
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_causal_queries_are_the_last_positions_when_fewer_than_keys():
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (2, 5, 5))
    out, weights = mha.attention(q, k, v, is_causal=True)
    # query 0 is position 3 of 0..4, query 1 is position 4: bottom-right aligned
    allowed = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert (weights[..., 0, 4] == 0).all() and (weights[..., 1, :] > 0).all()


def test_causal_fast_path_runs_the_fused_causal_kernel(monkeypatch):
    calls = []
    original = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    layer(4, 4)(torch.randn(1, 5, 16, dtype=torch.float64), is_causal=True, need_weights=False)
    assert calls and calls[0]["is_causal"] is True and calls[0]["attn_mask"] is None


@pytest.mark.parametrize("h_kv", [4, 2, 1])
@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("need_weights", [True, False])
def test_cached_decoding_equals_recomputing_the_prefix(h_kv, step, need_weights):
    module = layer(4, h_kv)
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    full, _ = module(x, is_causal=True)
    cache = mha.KVCache()
    pieces = [module(x[:, i:i + step], is_causal=True, cache=cache, need_weights=need_weights)[0]
              for i in range(0, 10, step)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-12)
    assert len(cache) == 10


def test_cache_holds_two_times_kv_heads_times_head_dim_numbers_per_token():
    module = layer(8, 2, d=32)  # head_dim 4
    cache = mha.KVCache()
    module(torch.randn(3, 11, 32, dtype=torch.float64), is_causal=True, cache=cache)
    assert cache.keys.shape == cache.values.shape == (3, 2, 11, 4)
    assert cache.nbytes == 2 * 3 * 2 * 4 * 11 * 8  # K and V, batch 3, 2 heads, 4, 11 tokens, f64


def test_cache_refuses_keys_of_another_shape():
    cache = mha.KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not fit"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))


@pytest.mark.parametrize("given", ["key", "value"])
def test_a_cache_on_a_cross_attention_call_is_refused_and_left_empty(given):
    """The encoder's memory as key appended itself again at every step: weights over 10 keys
    at the second step instead of 5, with no error."""
    module = layer(4, 2)
    memory = torch.randn(1, 5, 16, dtype=torch.float64)
    tgt = torch.randn(1, 1, 16, dtype=torch.float64)
    args = (memory,) if given == "key" else (tgt, torch.randn_like(tgt))  # a value of its own
    cache = mha.KVCache()
    with pytest.raises(ValueError, match=r"cache is for self-attention only.*pass no cache"):
        module(tgt, *args, cache=cache)
    assert len(cache) == 0


def test_a_cache_with_the_query_passed_as_key_and_value_still_decodes():
    module = layer(4, 2)
    x = torch.randn(2, 4, 16, dtype=torch.float64)
    cache = mha.KVCache()
    prompt, step = x[:, :2], x[:, 2:]
    pieces = [module(prompt, prompt, cache=cache, is_causal=True)[0],
              module(step, step, step, cache=cache, is_causal=True)[0]]
    torch.testing.assert_close(torch.cat(pieces, 1), module(x, is_causal=True)[0],
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_fully_masked_query_gets_zeros_with_grouped_heads(need_weights):
    module = layer(4, 2)
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    out, weights = module(x, mask=mask, need_weights=need_weights)
    no_heads = module.out_proj.bias  # a zero head output leaves only W_O's bias
    torch.testing.assert_close(out[0, 2], no_heads, rtol=0, atol=1e-12)
    if need_weights:
        assert (weights[0, :, 2] == 0).all()


def test_dropout_in_eval_mode_equals_nn_multihead_attention_exactly():
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(16, 4, dropout=0.3, batch_first=True).double().eval()
    ours = mha.MultiHeadAttention.from_torch(theirs).eval()
    assert ours.dropout == 0.3
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    for need_weights in (True, False):
        expected = theirs(x, x, x, need_weights=need_weights, average_attn_weights=False)
        got = ours(x, need_weights=need_weights)
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-12)
        if need_weights:
            torch.testing.assert_close(got[1], expected[1], rtol=0, atol=1e-12)


def test_dropout_weights_no_longer_sum_to_one_but_are_right_in_expectation():
    module = layer(4, 4, dropout=0.25).train()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    with torch.no_grad():
        clean = module.eval()(x)[1]
        module.train()
        samples = torch.stack([module(x)[1] for _ in range(4000)])
    sums = samples.sum(dim=-1)
    assert (sums - 1).abs().max() > 0.1  # single draws are not distributions
    kept = samples[samples != 0] / clean.expand_as(samples)[samples != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / 0.75))  # survivors scaled
    # E[weight] = clean weight; the sample mean's standard error is w sqrt(p / (1 - p) / N)
    stderr = clean * math.sqrt(0.25 / 0.75 / 4000)
    assert ((samples.mean(0) - clean).abs() <= 5 * stderr + 1e-12).all()


def test_a_cache_with_autograd_history_refuses_deepcopy_and_one_without_copies():
    import copy

    layer = mha.MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(0))
    cache = mha.KVCache()
    layer(x, cache=cache)
    with pytest.raises(ValueError, match="autograd history.*torch.no_grad"):
        copy.deepcopy(cache)
    with torch.no_grad():
        plain = mha.KVCache()
        layer(x, cache=plain)
    twin = copy.deepcopy(plain)
    assert torch.equal(twin.keys, plain.keys) and twin.keys is not plain.keys
    layer(x[:, :1], cache=twin)  # the copy grows on its own
    assert (len(twin), len(plain)) == (4, 3)


CACHED_LAYERS = {  # name: (layer, its empty cache)
    "multi-head": (lambda: mha.MultiHeadAttention(8, 2), mha.KVCache),
    "latent": (lambda: mha.MultiHeadLatentAttention(8, 2, latent_dim=4, rope_dim=2),
               mha.LatentCache),
}


@pytest.mark.parametrize("name", CACHED_LAYERS)
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's rms_norm
def test_a_cache_filled_under_autocast_is_refused_outside_with_a_fix_that_runs(name):
    """The message names the cache and autocast, and its line of code converts the cache:
    the step then runs and equals recomputing in float32 up to the cache's bfloat16 rounding."""
    make, new_cache = CACHED_LAYERS[name]
    torch.manual_seed(0)
    module = make().eval()
    x = torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(1))
    cache = new_cache()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        module(x[:, :2], cache=cache, is_causal=True)
    with pytest.raises(ValueError, match=r"cache holds \w+ of dtype torch.bfloat16 but this "
                       r"step's new \w+ are torch.float32.*torch.autocast") as refused:
        module(x[:, 2:], cache=cache, is_causal=True)
    assert len(cache) == 2  # refused before anything was added
    fix = re.search(r"`(cache\.[^`]+)`", str(refused.value)).group(1)
    exec(fix, {"cache": cache, "torch": torch})  # the line the message gives, as a user runs it
    step = module(x[:, 2:], cache=cache, is_causal=True)[0]
    full = module(x, is_causal=True)[0]
    assert step.dtype == torch.float32
    # bfloat16 keeps 8 bits: the cached entries are off by up to 0.4%, the outputs here by 1e-3
    torch.testing.assert_close(step, full[:, 2:], rtol=0, atol=1e-2)


def test_a_cache_filled_inside_vmap_is_refused_outside_with_the_fix():
    layer = mha.MultiHeadAttention(8, 2)
    cache = mha.KVCache()

    def step(x):
        return layer(x, cache=cache, is_causal=True)[0]

    torch.func.vmap(step)(torch.randn(2, 1, 3, 8))
    with pytest.raises(ValueError, match="inside torch.func.vmap.*new KVCache"):
        layer(torch.randn(1, 1, 8), cache=cache, is_causal=True)


@pytest.mark.parametrize("name", CACHED_LAYERS)
def test_a_cache_filled_by_one_layer_is_refused_by_another_of_the_same_shape(name):
    """Two layers of one shape fit each other's caches; the second used to read the first's
    keys silently (0.46 off). Refused, and the cache is unchanged; its own layer still works,
    and so do a deepcopy (same layer), a model deepcopied with its caches (the copied layer)
    and a pickle round trip (unbound, then bound to the next layer)."""
    import copy
    import pickle

    make, new_cache = CACHED_LAYERS[name]
    torch.manual_seed(0)
    first, second = make().eval(), make().eval()
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = new_cache()
        first(x[:, :4], cache=cache, is_causal=True)
        with pytest.raises(ValueError, match="cache was filled by another"):
            second(x[:, 4:], cache=cache, is_causal=True)
        assert len(cache) == 4
        expected = first(x, is_causal=True)[0][:, 4:]
        twin = copy.deepcopy(cache)
        torch.testing.assert_close(first(x[:, 4:], cache=cache, is_causal=True)[0], expected)
        with pytest.raises(ValueError, match="cache was filled by another"):
            second(x[:, 4:], cache=twin, is_causal=True)
        torch.testing.assert_close(first(x[:, 4:], cache=twin, is_causal=True)[0], expected)

        fresh = new_cache()
        first(x[:, :4], cache=fresh, is_causal=True)
        layer_copy, cache_copy = copy.deepcopy((first, fresh))
        with pytest.raises(ValueError, match="cache was filled by another"):
            first(x[:, 4:], cache=cache_copy, is_causal=True)
        torch.testing.assert_close(layer_copy(x[:, 4:], cache=cache_copy, is_causal=True)[0],
                                   expected)

        fresh = new_cache()
        first(x[:, :4], cache=fresh, is_causal=True)
        unpickled = pickle.loads(pickle.dumps(fresh))
        torch.testing.assert_close(first(x[:, 4:], cache=unpickled, is_causal=True)[0],
                                   expected)
        with pytest.raises(ValueError, match="cache was filled by another"):
            second(x[:, 4:], cache=unpickled, is_causal=True)

        fresh = new_cache()  # copy.copy drops the binding too, as the class docstring says
        first(x[:, :4], cache=fresh, is_causal=True)
        shallow = copy.copy(fresh)
        second(x[:, 4:], cache=shallow, is_causal=True)  # unbound: the next layer takes it
        with pytest.raises(ValueError, match="cache was filled by another"):
            first(x[:, 4:], cache=shallow, is_causal=True)
        assert len(fresh) == 4  # the original is untouched and still its layer's
        torch.testing.assert_close(first(x[:, 4:], cache=fresh, is_causal=True)[0], expected)


def test_a_decoder_refuses_caches_reversed_or_from_another_model_and_keeps_them():
    torch.manual_seed(0)
    model = mha.TinyDecoder(50, 32, embed_dim=16, num_heads=4, num_layers=2).eval()
    other = mha.TinyDecoder(50, 32, embed_dim=16, num_heads=4, num_layers=2).eval()
    tokens = torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(tokens)[:, -1]
        caches = model.new_caches()
        model(tokens[:, :7], caches=caches)
        with pytest.raises(ValueError, match="cache was filled by another"):
            model(tokens[:, 7:], caches=caches[::-1])
        theirs = other.new_caches()
        other(tokens[:, :7], caches=theirs)
        with pytest.raises(ValueError, match="cache was filled by another"):
            model(tokens[:, 7:], caches=theirs)
        assert [len(c) for c in caches + theirs] == [7, 7, 7, 7]
        torch.testing.assert_close(model(tokens[:, 7:], caches=caches)[:, -1], full)
