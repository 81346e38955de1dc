"""torch.compile(fullgraph=True) and torch.func.vmap on the main paths of MultiHeadAttention and
the KV-cache decode step, against eager outputs (issue 27).

Compiling is slow on a shared 2-core machine (tens of seconds for the first graph): the graph
checks use ``torch._dynamo.explain`` and the ``eager`` backend (Dynamo's tracing, which is what
fails on a graph break), and one test goes through AOTAutograd (``aot_eager``) forward and
backward; Inductor's C++ code generation is left out (110 s for one graph on this machine).
``make test-fast`` skips this module (Makefile's SLOW_TESTS).
"""

import pytest
import torch

import mha

CONFIGS = [  # (num_kv_heads, need_weights, is_causal)
    (None, True, False), (None, True, True), (None, False, False), (None, False, True),
    (2, True, True), (2, False, True), (2, False, False),
]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def layer_and_input(num_kv_heads=None, seed=0):
    torch.manual_seed(seed)
    layer = mha.MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads).eval()
    return layer, torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(seed + 1))


@pytest.mark.parametrize("num_kv_heads,need_weights,is_causal", CONFIGS)
def test_multi_head_attention_traces_in_one_graph_and_equals_eager(num_kv_heads, need_weights,
                                                                   is_causal):
    layer, x = layer_and_input(num_kv_heads)

    def forward(x):
        return layer(x, need_weights=need_weights, is_causal=is_causal)

    explained = torch._dynamo.explain(forward)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(forward, fullgraph=True, backend="eager")
    for got, expected in zip(compiled(x), forward(x), strict=True):
        torch.testing.assert_close(got, expected)


def test_aot_autograd_fullgraph_equals_eager_in_values_and_gradients():
    """AOTAutograd (the stage before Inductor's code generation, which alone took 110 s here)."""
    layer, x = layer_and_input(num_kv_heads=2)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(3)) > 0.3
    mask |= torch.eye(5, dtype=torch.bool)

    def forward(x):
        return layer(x, mask=mask, need_weights=False, is_causal=True)[0]

    compiled = torch.compile(forward, fullgraph=True, backend="aot_eager")
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, expected = compiled(x1), forward(x2)
    torch.testing.assert_close(got, expected)
    got.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)


def decode_step(layer):
    """One decoding step: the new token attends over the cached keys and values."""
    def step(x, keys, values):
        cache = mha.KVCache()
        cache.keys, cache.values = keys, values
        out, _ = layer(x, cache=cache, is_causal=True, need_weights=False)
        return out, cache.keys, cache.values
    return step


def prefilled(layer, seq):
    cache = mha.KVCache()
    layer(seq[:, :-1], cache=cache, is_causal=True, need_weights=False)
    return cache


def test_kv_cache_decode_step_traces_in_one_graph_and_equals_recomputing():
    layer, _ = layer_and_input(num_kv_heads=2)
    seq = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(5))
    cache = prefilled(layer, seq)
    step = decode_step(layer)
    explained = torch._dynamo.explain(step)(seq[:, -1:], cache.keys, cache.values)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    out, keys, _ = torch.compile(step, fullgraph=True, backend="eager")(
        seq[:, -1:], cache.keys, cache.values)
    assert keys.shape[2] == 6
    # the reference: the whole sequence at once, causal, last position
    full, _ = layer(seq, is_causal=True, need_weights=False)
    torch.testing.assert_close(out, full[:, -1:])


def test_kv_cache_object_itself_compiles():
    """A KVCache passed in and mutated by the compiled function (attribute side effects)."""
    layer, _ = layer_and_input()
    seq = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(6))
    cache = prefilled(layer, seq)

    def step(x):
        return layer(x, cache=cache, is_causal=True, need_weights=False)[0]

    out = torch.compile(step, fullgraph=True, backend="eager")(seq[:, -1:])
    assert len(cache) == 4
    torch.testing.assert_close(out, layer(seq, is_causal=True)[0][:, -1:])


@pytest.mark.parametrize("num_kv_heads,need_weights,is_causal", CONFIGS)
def test_vmap_over_a_leading_dimension_equals_a_loop(num_kv_heads, need_weights, is_causal):
    layer, _ = layer_and_input(num_kv_heads)
    xs = torch.randn(3, 2, 5, 16, generator=torch.Generator().manual_seed(7))
    # per sample (B, 1, 1, n_k) = (2, 1, 1, 5): padding that differs between the samples
    mask = torch.rand(3, 2, 1, 1, 5, generator=torch.Generator().manual_seed(8)) > 0.2
    mask[..., 0] = True

    def forward(x, m):
        return layer(x, mask=m, need_weights=need_weights, is_causal=is_causal)[0]

    got = torch.func.vmap(forward)(xs, mask)  # batched masks too
    expected = torch.stack([forward(x, m) for x, m in zip(xs, mask, strict=True)])
    torch.testing.assert_close(got, expected)


def test_vmap_over_the_decode_step():
    layer, _ = layer_and_input(num_kv_heads=2)
    seqs = torch.randn(3, 2, 6, 16, generator=torch.Generator().manual_seed(9))
    caches = [prefilled(layer, seq) for seq in seqs]
    keys = torch.stack([c.keys for c in caches])
    values = torch.stack([c.values for c in caches])
    out, _, _ = torch.func.vmap(decode_step(layer))(seqs[:, :, -1:], keys, values)
    for i, seq in enumerate(seqs):
        torch.testing.assert_close(out[i], layer(seq, is_causal=True)[0][:, -1:])


def test_debug_switch_keeps_the_nan_rule_in_eager_and_can_be_turned_off():
    """On (the default), the fused path shows what mha.attention shows for a NaN in a future
    key; off, it gives PyTorch's fused kernel's result, whatever that kernel does with it."""
    layer, x = layer_and_input()
    x = x.clone()
    x[:, -1, 0] = float("nan")  # the last token: in every earlier query's future
    assert mha.get_debug()
    explicit = layer(x, is_causal=True, need_weights=True)[0]
    torch.testing.assert_close(layer(x, is_causal=True, need_weights=False)[0], explicit,
                               equal_nan=True)
    assert explicit[:, :-1].isnan().all()  # masking is not cleaning: NaN + (-inf) = NaN
    previous = mha.set_debug(False)
    try:
        fused = layer(x, is_causal=True, need_weights=False)[0]
        q, k, v = layer._project(x, x, x)
        kernel = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        expected = layer.out_proj(kernel.transpose(1, 2).reshape(2, 5, 16))
        torch.testing.assert_close(fused, expected, equal_nan=True)  # the kernel's own result
    finally:
        mha.set_debug(previous)
    assert mha.get_debug() == previous
    with pytest.raises(ValueError, match="flag"):
        mha.set_debug("no")
