"""Seed 002 read literally (split the token, then project each chunk): a block-diagonal layer."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(4)  # make chapter runs this file (issue 38)

F64 = torch.float64


def split_reference(layer, x):
    """Seed 002's formula in float64: head i = SelfAttention(V_i; W^(i)) on chunk i only."""
    h, c = layer.num_heads, layer.embed_dim // layer.num_heads
    x = x.double()
    heads = []
    for i in range(h):
        chunk = x[..., i * c:(i + 1) * c]
        rows = slice(i * c, (i + 1) * c)

        def project(linear, chunk=chunk, rows=rows):
            # the block of the weight that maps chunk i to head i; nn.Linear stores W^T
            out = chunk @ linear.weight.double()[rows, rows].T
            return out if linear.bias is None else out + linear.bias.double()[rows]

        q, k, v = project(layer.q_proj), project(layer.k_proj), project(layer.v_proj)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c), dim=-1)
        heads.append(weights @ v)
    return layer.out_proj.double()(torch.cat(heads, dim=-1))


@settings(max_examples=20, deadline=None)
@given(h=st.integers(1, 4), c=st.integers(1, 4), n=st.integers(1, 5), seed=st.integers(0, 999))
def test_split_input_layer_is_seed_002s_formula(h, c, n, seed):
    torch.manual_seed(seed)
    layer = mha.SplitInputAttention(h * c, h).double()
    x = torch.randn(2, n, h * c, dtype=F64)
    torch.testing.assert_close(layer(x)[0], split_reference(layer, x))


def test_split_input_weights_are_block_diagonal_and_train_that_way():
    torch.manual_seed(0)
    layer = mha.SplitInputAttention(6, 3)
    blocks = torch.block_diag(*[torch.ones(2, 2)] * 3).bool()
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.randn(2, 4, 6))[0].square().sum().backward()
    opt.step()
    for proj in (layer.q_proj, layer.k_proj, layer.v_proj):
        assert (proj.weight[~blocks] == 0).all()
        assert (proj.weight[blocks] != 0).all()


@pytest.mark.claim("4.1")
@pytest.mark.parametrize("h", [1, 2, 3, 4, 6, 12])
def test_split_input_parameter_count(h):
    d = 12
    n_params = sum(p.numel() for p in mha.SplitInputAttention(d, h).parameters())
    assert n_params == 3 * d * d // h + d * d + 4 * d
    full = sum(p.numel() for p in mha.MultiHeadAttention(d, h).parameters())
    assert (n_params == full) == (h == 1)


@pytest.mark.claim("4.1")
def test_a_split_head_cannot_see_the_other_chunks():
    """Head 0's weights ignore chunk 1 in the split layer, but not in multi-head attention."""
    torch.manual_seed(1)
    split, full = mha.SplitInputAttention(8, 2).double(), mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(3, 5, 8, dtype=F64)
    y = x.clone()
    y[..., 4:] = torch.randn(3, 5, 4, dtype=F64)  # change only the second chunk
    torch.testing.assert_close(split(x)[1][:, 0], split(y)[1][:, 0])
    assert (full(x)[1][:, 0] - full(y)[1][:, 0]).abs().max() > 1e-3


def test_split_input_needs_divisible_width():
    with pytest.raises(ValueError, match="embed_dim=10 is not divisible by num_heads=4"):
        mha.SplitInputAttention(10, 4)
