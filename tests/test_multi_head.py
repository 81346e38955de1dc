"""MultiHeadAttention (chapter 4): equal to nn.MultiheadAttention for every option, the two
views of multi-head attention, the fused fast path, parameter counts and bad input."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mha

F64 = torch.float64


# --- an independent float64 reference: h separate heads, written from the paper's formula ---

def separate_heads_reference(layer, query, key, value, bool_mask=None):
    """``Concat_i softmax(Q W_Q,i (K W_K,i)^T / sqrt(d_k)) V W_V,i  W_O`` head by head."""
    h, dk = layer.num_heads, layer.head_dim
    query, key, value = query.double(), key.double(), value.double()

    def matrix(linear, i):  # the seed's W_i (in x d_k): rows i*dk..(i+1)*dk of weight, transposed
        return linear.weight.double()[i * dk:(i + 1) * dk].T

    def bias(linear, i):
        return 0.0 if linear.bias is None else linear.bias.double()[i * dk:(i + 1) * dk]

    heads, all_weights = [], []
    for i in range(h):
        q = query @ matrix(layer.q_proj, i) + bias(layer.q_proj, i)
        k = key @ matrix(layer.k_proj, i) + bias(layer.k_proj, i)
        v = value @ matrix(layer.v_proj, i) + bias(layer.v_proj, i)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if bool_mask is not None:
            m = torch.broadcast_to(bool_mask, (query.shape[0], h) + scores.shape[-2:])[:, i]
            scores = scores.masked_fill(~m, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        heads.append(weights @ v)
        all_weights.append(weights)
    concat = torch.cat(heads, dim=-1)
    out = concat @ layer.out_proj.weight.double().T
    if layer.out_proj.bias is not None:
        out = out + layer.out_proj.bias.double()
    return out, torch.stack(all_weights, dim=1)


# --- equal to PyTorch: from_torch for every option of nn.MultiheadAttention ---

def _torch_call(module, query, key, value, batch_first, **kwargs):
    """Call ``module`` on batch-first tensors, whatever its own ``batch_first``; batch-first out."""
    if not batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    out, weights = module(query, key, value, **kwargs)
    return (out if batch_first else out.transpose(0, 1)), weights


MASKS = ["none", "key_padding", "bool_attn", "float_attn", "bool_attn_3d", "padding_and_float"]


@pytest.mark.parametrize(
    "kv_dims, bias, batch_first, mask_kind, cross",
    [
        (kv, b, bf, m, cross)
        for kv, b, bf, m, cross in itertools.product(
            [None, (5, 7)], [True, False], [True, False], MASKS, [False, True]
        )
        if not (kv is not None and not cross)  # other key/value sizes need cross-attention
    ],
)
def test_from_torch_equals_nn_multihead_attention(kv_dims, bias, batch_first, mask_kind, cross):
    torch.manual_seed(0)
    embed_dim, h, batch, n_q = 12, 3, 2, 4
    n_k = 6 if cross else n_q
    kdim, vdim = kv_dims if kv_dims else (None, None)
    reference = nn.MultiheadAttention(embed_dim, h, bias=bias, kdim=kdim, vdim=vdim,
                                      batch_first=batch_first, dtype=F64).eval()
    if bias:  # torch starts its biases at zero; make them matter
        with torch.no_grad():
            reference.in_proj_bias.normal_()
            reference.out_proj.bias.normal_()
    ours = mha.MultiHeadAttention.from_torch(reference)
    assert (ours.embed_dim, ours.num_heads, ours.head_dim) == (embed_dim, h, embed_dim // h)
    assert (ours.kdim, ours.vdim) == (kdim or embed_dim, vdim or embed_dim)
    assert ours.q_proj.weight.dtype == F64

    query = torch.randn(batch, n_q, embed_dim, dtype=F64)
    if cross:
        key = torch.randn(batch, n_k, kdim or embed_dim, dtype=F64)
        value = torch.randn(batch, n_k, vdim or embed_dim, dtype=F64)
    else:
        key = value = query

    # torch's masks: True = do NOT attend. Key 0 stays visible so no row is fully masked.
    padding = torch.rand(batch, n_k) < 0.4
    padding[:, 0] = False
    blocked = torch.rand(n_q, n_k) < 0.4
    blocked[:, 0] = False
    float_attn = torch.randn(n_q, n_k, dtype=F64)
    theirs, ours_mask = {}, None
    if mask_kind == "key_padding":
        theirs = {"key_padding_mask": padding}
        ours_mask = ~padding[:, None, None, :]  # (B, 1, 1, n_k), True = may attend
    elif mask_kind == "bool_attn":
        theirs = {"attn_mask": blocked}
        ours_mask = ~blocked
    elif mask_kind == "float_attn":
        theirs = {"attn_mask": float_attn}
        ours_mask = float_attn
    elif mask_kind == "bool_attn_3d":  # torch's per-head mask is (B * h, n_q, n_k)
        per_head = torch.rand(batch * h, n_q, n_k) < 0.4
        per_head[:, :, 0] = False
        theirs = {"attn_mask": per_head}
        ours_mask = ~per_head.view(batch, h, n_q, n_k)
    elif mask_kind == "padding_and_float":
        # torch wants both masks of one type here: a float padding mask, -inf = padded
        float_padding = torch.zeros(batch, n_k, dtype=F64).masked_fill(padding, float("-inf"))
        theirs = {"key_padding_mask": float_padding, "attn_mask": float_attn}
        ours_mask = float_attn + float_padding[:, None, None, :]

    expected, expected_weights = _torch_call(reference, query, key, value, batch_first,
                                             average_attn_weights=False, **theirs)
    out, weights = ours(query, key, value, mask=ours_mask)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)

    # torch's default need_weights returns the weights averaged over heads
    _, averaged = _torch_call(reference, query, key, value, batch_first, **theirs)
    torch.testing.assert_close(weights.mean(dim=1), averaged)

    # the fused fast path gives the same output
    fast, none = ours(query, key, value, mask=ours_mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected)


def test_from_torch_gradients_match():
    torch.manual_seed(1)
    reference = nn.MultiheadAttention(8, 2, batch_first=True, dtype=F64)
    ours = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 8, dtype=F64, requires_grad=True)
    (grad_theirs,) = torch.autograd.grad(reference(x, x, x)[0].square().sum(), x)
    for need_weights in (True, False):
        (grad_ours,) = torch.autograd.grad(
            ours(x, need_weights=need_weights)[0].square().sum(), x)
        torch.testing.assert_close(grad_ours, grad_theirs)


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="plain nn.MultiheadAttention, got Linear"):
        mha.MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="add_bias_kv"):
        mha.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        mha.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_zero_attn=True))


# --- the two views: one big projection reshaped into heads = h separate projections ---

@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 4), head_dim=st.integers(1, 5), extra=st.integers(0, 3),
       n_q=st.integers(1, 5), n_k=st.integers(1, 5), bias=st.booleans(),
       seed=st.integers(0, 2**16))
@pytest.mark.claim("4.1", "4.3")
def test_big_projection_equals_separate_heads(h, head_dim, extra, n_q, n_k, bias, seed):
    torch.manual_seed(seed)
    embed_dim = h + extra  # head_dim is free (seed 000): h * head_dim need not equal embed_dim
    layer = mha.MultiHeadAttention(embed_dim, h, head_dim=head_dim, kdim=3, vdim=2,
                                   bias=bias).double()
    query = torch.randn(2, n_q, embed_dim, dtype=F64)
    key, value = torch.randn(2, n_k, 3, dtype=F64), torch.randn(2, n_k, 2, dtype=F64)
    out, weights = layer(query, key, value)
    expected, expected_weights = separate_heads_reference(layer, query, key, value)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert weights.shape == (2, h, n_q, n_k)


# --- the fused fast path equals the explicit one ---

@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 3), n=st.integers(1, 6), seed=st.integers(0, 2**16),
       kind=st.sampled_from(["bool", "float32", "causal", "padding"]))
def test_fast_path_equals_explicit_path(h, n, seed, kind):
    torch.manual_seed(seed)
    layer = mha.MultiHeadAttention(4 * h, h).double()
    x = torch.randn(2, n, 4 * h, dtype=F64)
    if kind == "bool":  # may leave whole rows without a key: both paths give zeros there
        mask = torch.rand(2, h, n, n) < 0.6
    elif kind == "float32":  # a float mask in another dtype than the input
        mask = torch.randn(n, n).masked_fill(torch.rand(n, n) < 0.3, float("-inf"))
    elif kind == "causal":
        mask = torch.ones(n, n, dtype=torch.bool).tril()
    else:
        mask = (torch.rand(2, 1, 1, n) < 0.7)
    explicit, _ = layer(x, mask=mask)
    fast, _ = layer(x, mask=mask, need_weights=False)
    assert not fast.isnan().any() and not explicit.isnan().any()
    torch.testing.assert_close(fast, explicit)


def test_a_query_without_keys_gets_the_bias_only():
    layer = mha.MultiHeadAttention(4, 2).double()
    x = torch.randn(1, 3, 4, dtype=F64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    for need_weights in (True, False):
        out, _ = layer(x, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out[0, 1], layer.out_proj.bias.detach())


# --- head_mask ---

def test_head_mask_gates_each_head_before_the_output_projection():
    torch.manual_seed(2)
    layer = mha.MultiHeadAttention(6, 3).double()
    x = torch.randn(2, 4, 6, dtype=F64)
    gates = torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]], dtype=F64)
    out, weights = layer(x, head_mask=gates)
    _, ref_weights = separate_heads_reference(layer, x, x, x)
    heads = ref_weights @ layer.v_proj(x).view(2, 4, 3, 2).transpose(1, 2)
    heads = heads * gates[:, :, None, None]
    expected = layer.out_proj(heads.transpose(1, 2).reshape(2, 4, 6))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, ref_weights)  # weights are before the gate
    fast, _ = layer(x, head_mask=gates, need_weights=False)
    torch.testing.assert_close(fast, expected)


# --- parameter count (seed 002): independent of h when d_k = d_v = d / h ---

def mha_parameter_formula(d, h, dk, dv, kdim, vdim, bias):
    weights = d * h * dk + kdim * h * dk + vdim * h * dv + h * dv * d
    return weights + (2 * h * dk + h * dv + d if bias else 0)


@pytest.mark.claim("4.2")
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count_is_independent_of_h_when_head_dim_is_d_over_h(bias):
    d = 24
    counts = set()
    for h in [h for h in range(1, d + 1) if d % h == 0]:
        layer = mha.MultiHeadAttention(d, h, bias=bias)
        n_params = sum(p.numel() for p in layer.parameters())
        assert n_params == mha_parameter_formula(d, h, d // h, d // h, d, d, bias)
        counts.add(n_params)
    assert counts == {4 * d * d + (4 * d if bias else 0)}


@pytest.mark.claim("4.2")
def test_parameter_count_grows_with_h_at_fixed_head_dim():
    counts = [sum(p.numel() for p in mha.MultiHeadAttention(8, h, head_dim=4).parameters())
              for h in (1, 2, 4)]
    assert counts == [mha_parameter_formula(8, h, 4, 4, 8, 8, True) for h in (1, 2, 4)]
    assert counts[0] < counts[1] < counts[2]


# --- bad input: ValueError naming the shapes ---

def test_construction_errors_name_the_values():
    with pytest.raises(ValueError, match=r"embed_dim=10 is not divisible by num_heads=3"):
        mha.MultiHeadAttention(10, 3)
    assert mha.MultiHeadAttention(10, 3, head_dim=4).q_proj.out_features == 12
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        mha.MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got True"):
        mha.MultiHeadAttention(8, True)
    with pytest.raises(ValueError, match="head_dim must be a positive int, got 2.0"):
        mha.MultiHeadAttention(8, 2, head_dim=2.0)


def test_input_errors_name_the_shapes():
    layer = mha.MultiHeadAttention(8, 2, kdim=5, vdim=3)
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 5), torch.randn(2, 6, 3)
    with pytest.raises(
        ValueError, match=r"query must have shape \(batch, tokens, 8\), got \(2, 4, 7\)"
    ):
        layer(torch.randn(2, 4, 7), k, v)
    with pytest.raises(
        ValueError, match=r"key must have shape \(batch, tokens, 5\), got \(2, 6, 8\)"
    ):
        layer(q, torch.randn(2, 6, 8), v)
    with pytest.raises(
        ValueError, match=r"value must have shape \(batch, tokens, 3\), got \(2, 6, 5\)"
    ):
        layer(q, k, torch.randn(2, 6, 5))
    with pytest.raises(
        ValueError, match=r"query must have shape \(batch, tokens, 8\), got \(4, 8\)"
    ):
        layer(torch.randn(4, 8), k, v)
    with pytest.raises(ValueError, match=r"same batch size: \(2, 4, 8\), \(3, 6, 5\)"):
        layer(q, torch.randn(3, 6, 5), torch.randn(3, 6, 3))
    with pytest.raises(
        ValueError, match=r"same number of tokens: key \(2, 6, 5\), value \(2, 5, 3\)"
    ):
        layer(q, k, torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="floating dtype"):
        layer(q.long(), k, v)


def test_mask_errors_name_the_shapes():
    layer = mha.MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8)
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 5\) does not broadcast to .*\(2, 2, 4, 4\)"
    ):
        layer(x, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"3-D mask of shape \(2, 4, 4\) is ambiguous"):
        layer(x, mask=torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be bool"):
        layer(x, mask=torch.ones(4, 4, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"head_mask must have shape \(2,\) or \(2, 2\) for 2 heads, got \(3,\)"
    ):
        layer(x, head_mask=torch.ones(3))
    with pytest.raises(ValueError, match="head_mask must be a torch.Tensor, got list"):
        layer(x, head_mask=[1.0, 1.0])


# --- FLOPs (seed 002, implied): the matrix products do not depend on h when d_k = d / h ---

@pytest.mark.claim("4.5")
def test_matmul_flops_are_independent_of_h():
    from torch.utils.flop_counter import FlopCounterMode

    d, n = 32, 10
    x = torch.randn(2, n, d)
    for h in (1, 2, 4, 8, 32):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            mha.MultiHeadAttention(d, h)(x)
        # per sequence: projections 6 n d^2, scores 2 n^2 d, A V 2 n^2 d, W_O 2 n d^2
        assert counter.get_total_flops() == 2 * (8 * n * d * d + 4 * n * n * d)


# --- chapter 3's limit and chapter 4's remedy, trained (a few seconds) ---

@pytest.mark.claim("3.2", "4.4")
def test_two_lookups_need_two_heads():
    """One head (any width) stays at the bound (1 - 1/n)/2; two heads of half the width solve it."""
    n, m = 6, 3
    d = 3 * n + 2 * m
    bound = 0.5 * (1 - 1 / n)
    errors = {}
    for name, layer in [("one", lambda: mha.MultiHeadAttention(d, 1, head_dim=16)),
                        ("two", lambda: mha.MultiHeadAttention(d, 2, head_dim=8))]:
        torch.manual_seed(0)
        model = mha.LookupModel(layer(), d, 2 * m)
        mha.train_lookup(model, n, m, n_lookups=2, steps=400, seed=0)
        errors[name] = mha.relative_error(model, n, m, n_lookups=2)
    assert errors["one"] > bound - 0.03
    assert errors["two"] < 0.05
