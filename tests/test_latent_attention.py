"""Multi-head latent attention: the paper's equations, DeepSeek's code, the cache, absorption."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mha
from mha.layers.rotary import apply_rotary

pytestmark = pytest.mark.chapter(9)  # make chapter runs this file (issue 38)

H, D_H, D_C, D_R, WIDTH = 4, 8, 12, 4, 32


def layer(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return mha.MultiHeadLatentAttention(WIDTH, H, latent_dim=D_C, rope_dim=D_R,
                                        head_dim=D_H).to(dtype)


def naive_mla(att, x):
    """DeepSeek-V2's equations (9)-(19) written out head by head and token by token."""
    n = x.shape[1]
    positions = torch.arange(n)
    c = att.latent_norm(x @ att.kv_down.weight.T)  # (B, n, d_c)
    k_r = apply_rotary(x @ att.k_rope.weight.T, positions)  # (B, n, d_R): one key for all heads
    heads = []
    for i in range(H):
        rows = slice(i * D_H, (i + 1) * D_H)
        rope_rows = slice(i * D_R, (i + 1) * D_R)
        k_c = c @ att.k_up.weight[rows].T  # (B, n, d_h)
        v_c = c @ att.v_up.weight[rows].T
        q_c = x @ att.q_proj.weight[rows].T
        q_r = apply_rotary(x @ att.q_rope.weight[rope_rows].T, positions)
        outputs = []
        for t in range(n):
            scores = ((q_c[:, t:t + 1] * k_c[:, :t + 1]).sum(-1)
                      + (q_r[:, t:t + 1] * k_r[:, :t + 1]).sum(-1)) / math.sqrt(D_H + D_R)
            weights = torch.softmax(scores, dim=-1)  # (B, t + 1)
            outputs.append((weights[..., None] * v_c[:, :t + 1]).sum(1))
        heads.append(torch.stack(outputs, 1))  # (B, n, d_h)
    return torch.cat(heads, -1) @ att.out_proj.weight.T


def test_layer_is_the_papers_equations():
    att = layer()
    x = torch.randn(2, 7, WIDTH, dtype=torch.float64)
    torch.testing.assert_close(att(x)[0], naive_mla(att, x), rtol=0, atol=1e-12)


@pytest.mark.claim("9.5")
@pytest.mark.parametrize("with_cache", [False, True])
def test_absorbing_w_uk_into_the_queries_changes_nothing(with_cache):
    att = layer()
    x = torch.randn(3, 9, WIDTH, dtype=torch.float64)
    if not with_cache:
        torch.testing.assert_close(att(x, absorb=True)[0], att(x)[0], rtol=0, atol=1e-12)
        return
    caches = [att.new_cache(), att.new_cache()]
    outs = {False: [], True: []}
    for start, stop in [(0, 4), (4, 5), (5, 9)]:
        for absorb, cache in zip([False, True], caches, strict=True):
            outs[absorb].append(att(x[:, start:stop], cache=cache, absorb=absorb)[0])
    torch.testing.assert_close(torch.cat(outs[True], 1), torch.cat(outs[False], 1),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat(outs[False], 1), att(x)[0], rtol=0, atol=1e-12)


class ProvenanceWatch(TorchDispatchMode):
    """Follows, op by op (inside SDPA too), which of the layer's sources each tensor was computed
    from: "query" (W_Q and its rotary part), "latent" (W_DKV and the cached latents) and
    "up" (W_UK, W_UV). A tensor made from the latents and an up-projection but not from the
    query is a decompressed key or value (some of one, in any layout); ``decompressed`` holds
    the shapes of those, ``shapes`` every op's output shape."""

    def __init__(self, sources: dict[str, list[torch.Tensor]]):
        super().__init__()
        self.kept = []  # the tensors seen, alive while watched: an id is never reused
        self.origin = {}  # id(tensor) -> the sources it was computed from
        for name, tensors in sources.items():
            for t in tensors:
                self.mark(t, {name})
        self.shapes, self.decompressed = [], []

    def mark(self, t, origin):
        self.kept.append(t)
        self.origin[id(t)] = self.origin.get(id(t), frozenset()) | origin

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        origin = frozenset().union(*(self.origin.get(id(t), frozenset())
                                     for t in tensors_in((args, kwargs))))
        for t in tensors_in(out):
            self.mark(t, origin)
            self.shapes.append(tuple(t.shape))
            if {"latent", "up"} <= origin and "query" not in origin:
                self.decompressed.append(tuple(t.shape))
        return out


def tensors_in(value):
    """The tensors in a nest of tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


def decoding_step(absorb, sdpa=None):
    """One decoding step (batch 3, one new token) over a cache of 8 latents, watched: its
    output, the watch and the outputs of W_UK and W_UV called as modules. ``sdpa(att, real)``
    gives what stands in for the layer's scaled_dot_product_attention."""
    from mha.layers import latent_attention

    att = layer()
    x = torch.randn(3, 9, WIDTH, dtype=torch.float64)
    applied = []
    for module in (att.k_up, att.v_up):
        module.register_forward_hook(lambda m, args, out: applied.append(tuple(out.shape)))
    cache = att.new_cache()
    att(x[:, :8], cache=cache, absorb=absorb)  # prefill: 8 latents cached
    applied.clear()
    sources = {"query": [att.q_proj.weight, att.q_rope.weight],
               "latent": [att.kv_down.weight, cache.latents],
               "up": [att.k_up.weight, att.v_up.weight]}
    real = latent_attention.F.scaled_dot_product_attention
    latent_attention.F.scaled_dot_product_attention = sdpa(att, real) if sdpa else real
    try:
        with ProvenanceWatch(sources) as watch, torch.no_grad():
            out = att(x[:, 8:], cache=cache, absorb=absorb)[0]  # n_k = 9
    finally:
        latent_attention.F.scaled_dot_product_attention = real
    return out, watch, applied


@pytest.mark.claim("9.5")
def test_the_absorbed_decoding_step_never_forms_per_head_keys():
    """The absorbed path computes nothing from the cached latents and W_UK or W_UV without the
    query (no decompressed key or value, nor any part of one, in any layout), and never calls
    W_UK or W_UV as modules, while the watch sees inside the attention (its scores, one query
    against 9 keys in each head); the decompressing path does form them, so the watch can fail."""
    out, watch, applied = decoding_step(absorb=True)
    assert watch.decompressed == [] and applied == []
    assert (3, H, 1, 9) in watch.shapes  # the scores: SDPA ran as operations the watch sees
    out_decompressed, watch, applied = decoding_step(absorb=False)
    assert (3, 9, H * D_H) in watch.decompressed  # keys and values, all heads side by side
    assert applied == [(3, 9, H * D_H), (3, 9, H * D_H)]
    torch.testing.assert_close(out, out_decompressed, rtol=0, atol=1e-12)


def keys_transposed(att, c):
    """Every head's keys, (B, h, d_h, n_k), from W_UK's weight without calling the module."""
    return torch.einsum("hdc,bhnc->bhdn", att.k_up.weight.view(H, D_H, -1), c)


def keys_of_two_heads(att, c):
    """Two heads' keys side by side, (B, n_k, 2 d_h): one linear map of the latents."""
    return torch.nn.functional.linear(c[:, 0], att.k_up.weight[:2 * D_H])


def keys_flattened(att, c):
    """All keys in one flat row per sequence, (B, n_k h d_h)."""
    return (c[:, 0] @ att.k_up.weight.T).flatten(1)


def keys_token_by_token(att, c):
    """One cached token's keys at a time, summed as they are made."""
    total = 0
    for t in range(c.shape[2]):
        total = total + (c[:, 0, t] @ att.k_up.weight.T).sum()
    return total


@pytest.mark.claim("9.5")
@pytest.mark.parametrize("formed", [keys_transposed, keys_of_two_heads, keys_flattened,
                                    keys_token_by_token])
def test_the_watch_finds_keys_formed_in_any_layout(formed):
    """Outside reviews' mutants: the absorbed step also forms keys, in a layout of its own, from
    W_UK's weight without calling the module, and leaves the output as it was. The watch of the
    test above sees each of them."""
    def mutant(att, real):
        def sdpa(q, k, v, attn_mask=None, scale=None, **kwargs):
            latents = k[..., :att.latent_dim]  # (B, h, n_k, d_c)
            return real(q, k, v, attn_mask=attn_mask, scale=scale, **kwargs) + \
                0 * formed(att, latents).sum()
        return sdpa

    out, watch, _ = decoding_step(absorb=True, sdpa=mutant)
    torch.testing.assert_close(out, decoding_step(absorb=True)[0], rtol=0, atol=0)
    assert watch.decompressed != []


def test_absorbed_scores_are_queries_times_w_uk_transposed_against_latents():
    """q_i . (W_UK,i c) = (W_UK,i^T q_i) . c for every head, query and latent."""
    g = torch.Generator().manual_seed(1)
    w_uk = torch.randn(H, D_H, D_C, generator=g, dtype=torch.float64)
    q = torch.randn(2, H, 5, D_H, generator=g, dtype=torch.float64)
    c = torch.randn(2, 6, D_C, generator=g, dtype=torch.float64)
    keys = torch.einsum("hdc,bnc->bhnd", w_uk, c)  # decompressed keys (B, h, n, d_h)
    direct = q @ keys.transpose(-2, -1)
    absorbed = torch.einsum("bhqd,hdc->bhqc", q, w_uk) @ c[:, None].transpose(-2, -1)
    torch.testing.assert_close(absorbed, direct, rtol=0, atol=1e-12)


def test_cache_holds_the_latent_and_one_rotary_key_per_token():
    att = layer(torch.float32)
    cache = att.new_cache()
    att(torch.randn(2, 5, WIDTH), cache=cache)
    att(torch.randn(2, 1, WIDTH), cache=cache)
    assert len(cache) == 6
    assert cache.latents.shape == (2, 6, D_C) and cache.rope_keys.shape == (2, 1, 6, D_R)
    assert cache.nbytes == 2 * 6 * (D_C + D_R) * 4
    assert att.cache_numbers_per_token() == D_C + D_R


def test_matches_transformers_deepseek_v3_attention():
    """An independent reference: Hugging Face's DeepSeek-V3 attention (MLA), no weights loaded."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    config = transformers.DeepseekV3Config(
        hidden_size=WIDTH, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=None,
        kv_lora_rank=D_C, qk_nope_head_dim=D_H, qk_rope_head_dim=D_R, v_head_dim=D_H,
        rope_interleave=True, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    config._attn_implementation = "eager"
    theirs = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    ours = layer(torch.float32)
    with torch.no_grad():  # their projections hold each head's [nope; rope] rows together
        q = theirs.q_proj.weight.view(H, D_H + D_R, WIDTH)
        ours.q_proj.weight.copy_(q[:, :D_H].reshape(H * D_H, WIDTH))
        ours.q_rope.weight.copy_(q[:, D_H:].reshape(H * D_R, WIDTH))
        ours.kv_down.weight.copy_(theirs.kv_a_proj_with_mqa.weight[:D_C])
        ours.k_rope.weight.copy_(theirs.kv_a_proj_with_mqa.weight[D_C:])
        kv = theirs.kv_b_proj.weight.view(H, 2 * D_H, D_C)
        ours.k_up.weight.copy_(kv[:, :D_H].reshape(H * D_H, D_C))
        ours.v_up.weight.copy_(kv[:, D_H:].reshape(H * D_H, D_C))
        ours.out_proj.weight.copy_(theirs.o_proj.weight)
        theirs.kv_a_layernorm.weight.uniform_(0.5, 1.5)
        ours.latent_norm.weight.copy_(theirs.kv_a_layernorm.weight)
    n = 7
    x = torch.randn(2, n, WIDTH)
    positions = torch.arange(n)[None]
    cos_sin = ds.DeepseekV3RotaryEmbedding(config)(x, positions)
    causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = theirs(x, position_embeddings=cos_sin, attention_mask=causal)
        got, _ = ours(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_bad_input_raises_value_error():
    att = layer(torch.float32)
    with pytest.raises(ValueError, match="x must have shape"):
        att(torch.randn(2, 5, WIDTH + 1))
    with pytest.raises(ValueError, match="rope_dim must be even"):
        mha.MultiHeadLatentAttention(WIDTH, H, latent_dim=8, rope_dim=3)
    with pytest.raises(ValueError, match="cache must be a LatentCache"):
        att(torch.randn(2, 5, WIDTH), cache=mha.KVCache())
    with pytest.raises(ValueError, match="is_causal"):
        att(torch.randn(2, 5, WIDTH), is_causal=False)


@pytest.mark.claim("9.6")
def test_deepseek_v2_sizes_cache_as_much_as_gqa_with_2_25_groups():
    """DeepSeek-V2: d_h = 128, d_c = 4 d_h = 512, d_h^R = d_h / 2 = 64 (its kv_lora_rank,
    qk_nope_head_dim and qk_rope_head_dim): the cache per token and layer equals that of
    grouped-query attention with 2.25 groups, 2 * 2.25 * d_h numbers."""
    d_h = 128
    att = mha.MultiHeadLatentAttention(256, 2, head_dim=d_h, latent_dim=4 * d_h,
                                       rope_dim=d_h // 2)
    cache = att.new_cache()
    with torch.no_grad():
        att(torch.randn(1, 3, 256), cache=cache)
    per_token = cache.nbytes // 3 // 4  # float32 numbers per token
    assert per_token == 576 == 4.5 * d_h
    gqa_groups = per_token / (2 * d_h)  # a GQA cache holds 2 * groups * d_h numbers per token
    assert gqa_groups == 2.25
    assert per_token == mha.analysis.cost.kv_cache_bytes(1, 1, d_h, 1) // 4 * 2.25


def test_a_latent_cache_with_autograd_history_refuses_deepcopy_and_one_without_copies():
    import copy

    att = layer(torch.float32)
    x = torch.randn(1, 3, WIDTH, generator=torch.Generator().manual_seed(0))
    cache = att.new_cache()
    att(x, cache=cache)
    with pytest.raises(ValueError, match="LatentCache holds latents with autograd history.*"
                                         "torch.no_grad"):
        copy.deepcopy(cache)
    with torch.no_grad():
        plain = att.new_cache()
        att(x, cache=plain)
    twin = copy.deepcopy(plain)
    assert torch.equal(twin.latents, plain.latents) and twin.latents is not plain.latents
    assert torch.equal(twin.rope_keys, plain.rope_keys)
    assert twin.rope_keys is not plain.rope_keys
    att(x[:, :1], cache=twin)  # the copy grows on its own
    assert (len(twin), len(plain)) == (4, 3)


def test_a_latent_cache_filled_inside_vmap_is_refused_outside_with_the_fix():
    att = layer(torch.float32)
    cache = att.new_cache()

    def step(x):
        return att(x, cache=cache)[0]

    torch.func.vmap(step)(torch.randn(2, 1, 3, WIDTH))
    with pytest.raises(ValueError, match="inside torch.func.vmap.*new LatentCache"):
        att(torch.randn(1, 1, WIDTH), cache=cache)
    fresh = att.new_cache()
    att(torch.randn(1, 1, WIDTH), cache=fresh)  # the fix the message names works
    assert len(fresh) == 1


def test_a_latent_cache_of_another_dtype_names_the_way_to_a_new_latent_cache():
    layer = mha.MultiHeadLatentAttention(16, 4, latent_dim=8, rope_dim=4)
    cache = layer.new_cache()
    layer(torch.randn(1, 3, 16), cache=cache)
    with pytest.raises(ValueError, match=r"Start a new cache \(layer\.new_cache\(\)") as raised:
        layer.double()(torch.randn(1, 1, 16, dtype=torch.float64), cache=cache)
    assert "KVCache" not in str(raised.value)
