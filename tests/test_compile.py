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
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

import mha

CONFIGS = [  # (num_kv_heads, need_weights, is_causal)
    (None, True, False), (None, True, True), (None, False, False), (None, False, True),
    (2, True, True), (2, False, True), (2, False, False),
]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()  # Dynamo's counters outlive reset()
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


@pytest.mark.parametrize("mapped", [False, True], ids=["shared-mask", "mapped-mask"])
def test_vmap_with_a_float_mask_that_needs_a_gradient_equals_a_loop(mapped):
    """need_weights=False under vmap with a learned float mask (a relative-position bias):
    PyTorch's fused CPU kernel raised 'not differentiable with respect to argument
    attn_mask'. Outputs and the mask's gradient equal a loop of eager weights-path calls."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(16, 4).eval()
    xs = torch.randn(3, 2, 5, 16, generator=torch.Generator().manual_seed(1))
    shape = (3, 5, 5) if mapped else (5, 5)
    bias = torch.randn(shape, generator=torch.Generator().manual_seed(2)).requires_grad_()

    def forward(x, m, need_weights):
        return layer(x, mask=m, need_weights=need_weights)[0]

    if mapped:
        got = torch.func.vmap(lambda x, m: forward(x, m, False))(xs, bias)
        expected = torch.stack([forward(x, m, True) for x, m in zip(xs, bias, strict=True)])
    else:
        got = torch.func.vmap(lambda x: forward(x, bias, False))(xs)
        expected = torch.stack([forward(x, bias, True) for x in xs])
    torch.testing.assert_close(got, expected)
    (grad_got,) = torch.autograd.grad(got.square().sum(), bias)
    (grad_expected,) = torch.autograd.grad(expected.square().sum(), bias)
    torch.testing.assert_close(grad_got, grad_expected)


def test_vmap_of_conv_to_attention_equals_a_loop():
    """Its scores reach MultiHeadAttention as a float mask that needs a gradient (the same
    fused-kernel refusal as above)."""
    torch.manual_seed(0)
    grid = mha.conv_to_attention(torch.nn.Conv2d(3, 4, 3, padding=1)).eval()
    images = torch.randn(2, 2, 3, 6, 7, generator=torch.Generator().manual_seed(3))
    got = torch.func.vmap(grid)(images)
    torch.testing.assert_close(got, torch.stack([grid(image) for image in images]))


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


# --- dynamic shapes: one graph for every length, a decode loop that never recompiles ---------

def counted_compile(fn, **options):
    """``torch.compile`` with Dynamo's own compile-count backend (eager execution of each
    graph): ``counter.frame_count`` is the number of graphs compiled, recompilations included."""
    counter = CompileCounter()
    return torch.compile(fn, backend=counter, fullgraph=True, **options), counter


@pytest.mark.parametrize("num_kv_heads", [2, 1, 4])
def test_compiled_kv_cache_decode_of_64_steps_compiles_once(num_kv_heads):
    """A growing cache changes a shape at every step: the compiled step must trace the length
    as a symbol (KVCache marks it) and read no size into a constant, or it recompiles per step.
    With one key/value head (tester 51) the prompt's cache had another stride than the steps'."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads).eval()
    seq = torch.randn(2, 69, 16, generator=torch.Generator().manual_seed(10))
    step, counter = counted_compile(
        lambda x, cache: layer(x, cache=cache, is_causal=True, need_weights=False)[0])
    cache = mha.KVCache()
    layer(seq[:, :5], cache=cache, is_causal=True, need_weights=False)  # the prompt, eagerly
    outs = [step(seq[:, i:i + 1], cache) for i in range(5, 69)]  # 64 decode steps
    assert len(cache) == 69
    assert counter.frame_count == 1  # compiled at the first step, never again
    assert counters["stats"]["unique_graphs"] == 1
    full, _ = layer(seq, is_causal=True, need_weights=False)  # recomputing every prefix
    torch.testing.assert_close(torch.cat(outs, dim=1), full[:, 5:])


@pytest.mark.parametrize("padding", [False, True])
def test_compiled_decode_with_an_eager_prompt_adds_a_graph_per_new_batch_and_growing_mask(
        padding):
    """What the docstrings of MultiHeadAttention and TinyDecoder say of an eager prompt: one
    graph, one more at the first new batch size, none at the next; a key_padding_mask
    growing with the cache costs one more graph, at the second step."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    step, counter = counted_compile(
        lambda x, cache, **mask: layer(x, cache=cache, is_causal=True, need_weights=False,
                                       **mask)[0])
    graphs = []
    for batch in (2, 3, 5):
        seq = torch.randn(batch, 9, 16, generator=torch.Generator().manual_seed(batch))
        pads = torch.zeros(batch, 9, dtype=torch.bool)

        def mask(n, pads=pads):
            return {"key_padding_mask": pads[:, :n].clone()} if padding else {}
        cache = mha.KVCache()
        layer(seq[:, :5], cache=cache, is_causal=True, need_weights=False, **mask(5))
        outs = []
        for i in range(5, 9):
            outs.append(step(seq[:, i:i + 1].contiguous(), cache, **mask(i + 1)))
            if batch == 2 and i == 5:
                graphs.append(counter.frame_count)  # after the first step
        graphs.append(counter.frame_count)
        full, _ = layer(seq, is_causal=True, need_weights=False)
        torch.testing.assert_close(torch.cat(outs, dim=1), full[:, 5:])
    assert graphs == ([1, 2, 3, 3] if padding else [1, 1, 2, 2])
    doc = " ".join(mha.MultiHeadAttention.__doc__.split())
    assert "The first new batch size adds one graph" in doc
    assert "growing with the cache one more, at the second step" in doc


def test_compiled_tiny_decoder_with_an_eager_prompt_adds_one_graph_for_a_new_batch_size():
    torch.manual_seed(0)
    model = mha.TinyDecoder(256, 32, embed_dim=16, num_heads=4, num_kv_heads=2,
                            num_layers=2).eval()
    step, counter = counted_compile(lambda tokens, caches: model(tokens, caches=caches))
    graphs = []
    with torch.no_grad():
        for batch in (2, 3, 5):
            tokens = torch.randint(256, (batch, 9), generator=torch.Generator().manual_seed(batch))
            caches = model.new_caches()
            model(tokens[:, :5], caches=caches)
            outs = [step(tokens[:, i:i + 1].contiguous(), caches) for i in range(5, 9)]
            torch.testing.assert_close(torch.cat(outs, dim=1), model(tokens)[:, 5:])
            graphs.append(counter.frame_count)
    assert graphs == [1, 2, 2]
    doc = " ".join(mha.TinyDecoder.__doc__.split())
    assert "compiles once when the prompt goes through the eager model" in doc
    assert "the first new batch size adds one graph" in doc


def decode_through(step, layer, batch, prompt_length, steps, seed):
    """The prompt and then ``steps`` single tokens through ``step``, one new cache; checks
    the outputs against recomputing the whole sequence with ``layer``."""
    seq = torch.randn(batch, prompt_length + steps, 16,
                      generator=torch.Generator().manual_seed(seed))
    cache = mha.KVCache()
    # contiguous copies: a slice's strides depend on seq's length, and Dynamo guards strides
    outs = [step(seq[:, :i].contiguous(), cache) if i == prompt_length
            else step(seq[:, i - 1:i].contiguous(), cache)
            for i in range(prompt_length, prompt_length + steps + 1)]
    full, _ = layer(seq, is_causal=True, need_weights=False)
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_compiled_decode_with_the_prompt_through_the_step_compiles_twice_when_dynamic():
    """What MultiHeadAttention's docstring says of the prompt through the compiled step:
    with dynamic=True one graph for prompts and one for steps, for other prompt lengths and
    batch sizes too (chosen unlike the layer's sizes 2, 4 and 16, and above 1, which Dynamo
    would tie to a constant)."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    step, counter = counted_compile(
        lambda x, cache: layer(x, cache=cache, is_causal=True, need_weights=False)[0],
        dynamic=True)
    decode_through(step, layer, batch=3, prompt_length=5, steps=6, seed=12)
    assert counter.frame_count == 2
    decode_through(step, layer, batch=5, prompt_length=7, steps=4, seed=13)
    assert counter.frame_count == 2  # a new prompt length and batch size: no recompile
    assert counters["stats"]["unique_graphs"] == 2


def test_compiled_decode_with_the_prompt_through_the_step_compiles_three_times_when_static():
    """Without dynamic=True the cache filled inside the prompt's compiled call is unmarked
    (PyTorch marks only in eager code): its first step takes the length as a constant and
    the next recompiles, as the docstring says; later steps reuse that graph, and the first
    new prompt length and batch size recompile once (Dynamo's automatic dynamic shapes)."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    step, counter = counted_compile(
        lambda x, cache: layer(x, cache=cache, is_causal=True, need_weights=False)[0])
    decode_through(step, layer, batch=2, prompt_length=5, steps=2, seed=14)
    assert counter.frame_count == 3
    decode_through(step, layer, batch=2, prompt_length=5, steps=8, seed=15)
    assert counter.frame_count == 3
    decode_through(step, layer, batch=2, prompt_length=7, steps=3, seed=16)
    assert counter.frame_count == 4  # the first new prompt length: the prompt's graph again
    decode_through(step, layer, batch=3, prompt_length=7, steps=3, seed=17)
    assert counter.frame_count == 6  # the first new batch size: both graphs again
    decode_through(step, layer, batch=5, prompt_length=6, steps=3, seed=18)
    assert counter.frame_count == 6  # Dynamo now traces both sizes as symbols


@pytest.mark.parametrize("attention", ["latent", "grouped"])
def test_compiled_tiny_decoder_decodes_in_one_graph_and_equals_generate(attention):
    torch.manual_seed(0)
    # latent attention has no key/value heads: num_kv_heads goes with the grouped layer only
    options = dict(make_attention=lambda: mha.MultiHeadLatentAttention(
        16, 4, latent_dim=8, rope_dim=4)) if attention == "latent" else dict(num_kv_heads=2)
    model = mha.TinyDecoder(256, 32, embed_dim=16, num_heads=4, num_layers=2,
                            **options).eval()
    prompt = torch.randint(256, (2, 5), generator=torch.Generator().manual_seed(11))
    step, counter = counted_compile(lambda tokens, caches: model(tokens, caches=caches))
    with torch.no_grad():
        caches = model.new_caches()
        tokens = [prompt]
        logits = model(prompt, caches=caches)[:, -1]  # the prompt, eagerly
        for _ in range(8):
            tokens.append(logits.argmax(dim=-1, keepdim=True))
            logits = step(tokens[-1], caches)[:, -1]
    assert counter.frame_count == 1
    assert torch.equal(torch.cat(tokens, dim=1), mha.generate(model, prompt, 8))


ATTENTION_LAYERS = {  # name: (layer, keyword arguments of a causal self-attention call)
    "multi-head": (lambda: mha.MultiHeadAttention(16, 4), dict(is_causal=True)),
    "multi-head, fused": (lambda: mha.MultiHeadAttention(16, 4),
                          dict(is_causal=True, need_weights=False)),
    "grouped-query": (lambda: mha.MultiHeadAttention(16, 4, num_kv_heads=2),
                      dict(is_causal=True, need_weights=False)),
    "latent": (lambda: mha.MultiHeadLatentAttention(16, 4, latent_dim=8, rope_dim=4), {}),
    "rotary": (lambda: mha.RotaryMultiHeadAttention(16, 4, num_kv_heads=2), {}),
}


@pytest.mark.parametrize("name", ATTENTION_LAYERS)
def test_dynamic_compile_makes_one_graph_for_every_sequence_length(name):
    make, options = ATTENTION_LAYERS[name]
    torch.manual_seed(0)
    layer = make().eval()
    compiled, counter = counted_compile(lambda x: layer(x, **options)[0], dynamic=True)
    for n in (3, 5, 8, 13):
        x = torch.randn(2, n, 16, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(compiled(x), layer(x, **options)[0])
    assert counter.frame_count == 1


def test_apply_rotary_compiles_in_one_graph_for_every_length():
    compiled, counter = counted_compile(mha.apply_rotary, dynamic=True)
    for n in (3, 6, 11):
        x = torch.randn(2, 4, n, 8, generator=torch.Generator().manual_seed(n))
        positions = torch.arange(7, 7 + n)
        torch.testing.assert_close(compiled(x, positions), mha.apply_rotary(x, positions))
    assert counter.frame_count == 1


class CausalSelfAttention(torch.nn.Module):
    """A layer called as a decoder calls it, for torch.export (which takes a module)."""

    def __init__(self, layer, options):
        super().__init__()
        self.layer, self.options = layer, options

    def forward(self, x):
        return self.layer(x, **self.options)[0]


@pytest.mark.parametrize("name", ["multi-head, fused", "grouped-query", "latent"])
def test_export_with_a_dynamic_length_equals_eager_at_other_lengths(name):
    make, options = ATTENTION_LAYERS[name]
    torch.manual_seed(0)
    module = CausalSelfAttention(make().eval(), options)
    length = torch.export.Dim("length", min=2, max=512)
    exported = torch.export.export(module, (torch.randn(2, 6, 16),),
                                   dynamic_shapes={"x": {1: length}})
    for n in (3, 17):
        x = torch.randn(2, n, 16, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(exported.module()(x), module(x))


class GatedAttention(torch.nn.Module):
    """A layer called with per-sequence gates ``(B, h)``, as ``torch.export`` takes it."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        return self.layer(x, head_mask=gates, need_weights=False)[0]


def test_export_with_a_dynamic_batch_and_per_sequence_gates_takes_a_batch_equal_to_heads():
    """The head_mask check compared (B, h) with (h,), so B with h: export guarded B != h and
    refused a batch range holding h = 4."""
    torch.manual_seed(0)
    module = GatedAttention(mha.MultiHeadAttention(16, 4).eval())
    batch = torch.export.Dim("batch", min=1, max=8)
    exported = torch.export.export(
        module, (torch.randn(2, 7, 16), torch.rand(2, 4)),
        dynamic_shapes={"x": {0: batch}, "gates": {0: batch}})
    for b in (4, 6):
        x = torch.randn(b, 7, 16, generator=torch.Generator().manual_seed(b))
        gates = torch.rand(b, 4, generator=torch.Generator().manual_seed(10 + b))
        torch.testing.assert_close(exported.module()(x, gates), module(x, gates))


def test_value_checks_skipped_when_compiled_still_refuse_bad_input_in_eager():
    """What compiled code leaves out (it cannot branch on values) eager code still says."""
    x = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="positions"):
        mha.apply_rotary(x, torch.tensor([2.0**40, 0.0, 1.0]))
    model = mha.TinyDecoder(16, 8, embed_dim=8, num_heads=2, num_layers=1)
    with pytest.raises(ValueError, match="tokens must lie in 0..15"):
        model(torch.tensor([[3, 16]]))


def test_the_memory_budget_still_refuses_in_compiled_code():
    """The budget check is a guard on the traced sizes, not a constant: an over-budget length
    raises with the usual message (fullgraph=True reports it as Dynamo's observed exception)."""
    layer = mha.MultiHeadAttention(16, 4).eval()
    compiled = torch.compile(lambda x: layer(x)[0], backend="eager", dynamic=True)
    compiled(torch.randn(1, 5, 16))
    with mha.memory_budget(10_000), pytest.raises(mha.MemoryBudgetError, match="query"):
        compiled(torch.randn(1, 200, 16))
    strict = torch.compile(lambda x: layer(x)[0], backend="eager", dynamic=True,
                           fullgraph=True)
    with mha.memory_budget(10_000), pytest.raises(Exception, match="memory budget"):
        strict(torch.randn(1, 200, 16))


def test_a_fullgraph_compile_over_the_budget_raises_dynamos_unsupported_naming_the_budget():
    """Dynamo cannot let an exception raised while tracing leave a ``fullgraph=True`` region
    (its "Observed exception" graph break), so the refusal is ``Unsupported`` whose message
    holds the MemoryBudgetError and its hint (what memory_budget's docstring says); without
    fullgraph the call falls back to eager and raises MemoryBudgetError itself. The budget is
    a constant of the graph: each new budget compiles again."""
    layer = mha.MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 50, 16)
    compiled, counter = counted_compile(lambda x: layer(x)[0])
    compiled(x)
    with mha.memory_budget(1000), pytest.raises(torch._dynamo.exc.Unsupported) as refused:
        compiled(x)
    assert not isinstance(refused.value, mha.MemoryBudgetError)
    for words in ("MemoryBudgetError", "shape (2, 50, 16)", "mha.memory_budget(nbytes)"):
        assert words in str(refused.value)
    frames = counter.frame_count
    for budget in (2**30, 2**31):  # both allow the call: each is a new graph all the same
        with mha.memory_budget(budget):
            compiled(x)
    assert counter.frame_count == frames + 2
    lenient = torch.compile(lambda x: layer(x)[0], backend="eager")
    with mha.memory_budget(1000), pytest.raises(mha.MemoryBudgetError, match="query"):
        lenient(x)


def test_causal_chunked_attention_compiles_in_one_graph_and_equals_eager():
    """Compiled, it skips no future block (that needs a look at the values): same output."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, n, 4, generator=g, dtype=torch.float64) for n in (7, 9))
    v = torch.randn(2, 9, 3, generator=g, dtype=torch.float64)
    compiled, counter = counted_compile(
        lambda a, b, c: mha.chunked_attention(a, b, c, chunk_size=3, causal=True))
    torch.testing.assert_close(compiled(q, k, v),
                               mha.chunked_attention(q, k, v, chunk_size=3, causal=True))
    assert counter.frame_count == 1


@pytest.mark.parametrize("mark_static", [False, True])
def test_dynamic_compile_with_a_head_mask_and_a_first_length_of_num_heads(mark_static):
    """Dynamo's duck sizing gives a first length equal to num_heads the head_mask's symbol,
    which the mask's shape check ties to num_heads: one graph more (the class docstring says
    so), none when the caller marks the gates static."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(16, 4).eval()
    compiled, counter = counted_compile(
        lambda x, gates: layer(x, head_mask=gates, need_weights=False)[0], dynamic=True)
    for n in (4, 6, 9):
        x, gates = torch.randn(2, n, 16), torch.rand(4)
        if mark_static:
            torch._dynamo.mark_static(gates)
        torch.testing.assert_close(compiled(x, gates),
                                   layer(x, head_mask=gates, need_weights=False)[0])
    assert counter.frame_count == (1 if mark_static else 2)


@pytest.mark.parametrize("batch, first, graphs", [(3, "batch", 2), (2, "batch", 1),
                                                  (3, "marked", 1), (3, "other", 1)])
def test_dynamic_compile_with_a_first_length_equal_to_the_batch(batch, first, graphs):
    """Duck sizing gives a first length equal to the batch size the batch's symbol: a later
    length compiles once more (tester 50; the class docstring says so), unless both dimensions
    are marked dynamic or the first length differs from the batch."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).eval()
    compiled, counter = counted_compile(lambda x: layer(x, need_weights=False)[0], dynamic=True)
    for n in ((5, 3, 7, 9) if first == "other" else (3, 5, 7, 9)):
        x = torch.randn(batch, n, 8)
        if first == "marked":
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(x, 1)
        torch.testing.assert_close(compiled(x), layer(x, need_weights=False)[0])
    assert counter.frame_count == graphs
