"""Quick checks of MultiHeadAttention and prune_heads that later chapters rely on."""

import pytest
import torch
from torch import nn

import mha


def test_self_attention_equals_torch_multihead():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64).eval()
    ours = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    out, weights = ours(x)
    expected, expected_weights = reference(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    fast, none = ours(x, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected)


def test_prune_heads_equals_gating():
    torch.manual_seed(1)
    layer = mha.MultiHeadAttention(16, 4)
    x = torch.randn(3, 6, 16)
    pruned = mha.prune_heads(layer, [0, 2])
    gated, _ = layer(x, head_mask=torch.tensor([0.0, 1.0, 0.0, 1.0]))
    out, weights = pruned(x)
    torch.testing.assert_close(out, gated)
    assert pruned.num_heads == 2 and weights.shape == (3, 2, 6, 6)
    n_params = sum(p.numel() for p in layer.parameters())
    assert sum(p.numel() for p in pruned.parameters()) < n_params


def test_bad_construction_and_inputs():
    with pytest.raises(ValueError, match="not divisible"):
        mha.MultiHeadAttention(10, 3)
    layer = mha.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"shape \(batch, tokens, 8\)"):
        layer(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match=r"head_mask must have shape \(2,\)"):
        layer(torch.randn(2, 3, 8), head_mask=torch.ones(3))
    with pytest.raises(ValueError, match="cannot prune all"):
        mha.prune_heads(layer, [0, 1])
