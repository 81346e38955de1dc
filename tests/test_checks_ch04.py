"""The exercise checks of chapter 4 accept the reference solutions and reject wrong ones."""

import pytest
import torch

import mha
import mha.checks.ch04

pytestmark = pytest.mark.chapter(4)

# --- 4.1: h separate heads packed into one module ---

def pack_solution(w_qs, w_ks, w_vs, w_o):
    d, dk = w_qs[0].shape
    layer = mha.MultiHeadAttention(d, len(w_qs), head_dim=dk, bias=False)
    with torch.no_grad():
        layer.q_proj.weight.copy_(torch.cat(w_qs, dim=1).T)
        layer.k_proj.weight.copy_(torch.cat(w_ks, dim=1).T)
        layer.v_proj.weight.copy_(torch.cat(w_vs, dim=1).T)
        layer.out_proj.weight.copy_(w_o.T)
    return layer


def pack_interleaved(w_qs, w_ks, w_vs, w_o):
    """Wrong: interleaves the heads' columns (stack on the last dim) instead of concatenating."""
    d, dk = w_qs[0].shape
    layer = mha.MultiHeadAttention(d, len(w_qs), head_dim=dk, bias=False)
    with torch.no_grad():
        for proj, ws in [(layer.q_proj, w_qs), (layer.k_proj, w_ks), (layer.v_proj, w_vs)]:
            proj.weight.copy_(torch.stack(ws, dim=-1).reshape(d, -1).T)
        layer.out_proj.weight.copy_(w_o.T)
    return layer


def test_check_4_1():
    assert mha.checks.ch04.pack_heads(pack_solution).status == "correct"
    assert mha.checks.ch04.pack_heads(pack_interleaved).status == "wrong"


def pack_without_transpose(w_qs, w_ks, w_vs, w_o):
    """Wrong: copies the (d, h d_k) matrices into nn.Linear's (h d_k, d) weights."""
    d, dk = w_qs[0].shape
    layer = mha.MultiHeadAttention(d, len(w_qs), head_dim=dk, bias=False)
    with torch.no_grad():
        layer.q_proj.weight.copy_(torch.cat(w_qs, dim=1))
    return layer


class WrongShapes(mha.MultiHeadAttention):
    """Wrong: a layer whose own forward multiplies tensors of shapes that do not fit."""

    def forward(self, x, *args, **kwargs):
        return x @ self.q_proj.weight, None


def test_check_4_1_names_the_call_and_the_shapes_of_a_size_error():
    building = mha.checks.ch04.pack_heads(pack_without_transpose)
    assert building.status == "wrong"
    assert "pack_heads raised RuntimeError" in building.message
    assert "W_Q,i, W_K,i and W_V,i of shape (6, 4)" in building.message
    assert "q_proj, k_proj and v_proj need (12, 6)" in building.message

    def returns_wrong_shapes(w_qs, w_ks, w_vs, w_o):
        return WrongShapes(6, 3, head_dim=4, bias=False)

    calling = mha.checks.ch04.pack_heads(returns_wrong_shapes)
    assert calling.status == "wrong"
    assert "calling your layer on x of shape (2, 5, 6) raised RuntimeError" in calling.message
    assert "q_proj.weight (12, 6)" in calling.message


def pack_without_head_dim(w_qs, w_ks, w_vs, w_o):
    """Wrong: forgets head_dim, so the heads get size d / h = 2 instead of d_k = 4."""
    d, _ = w_qs[0].shape
    layer = mha.MultiHeadAttention(d, len(w_qs), bias=False)
    with torch.no_grad():
        layer.q_proj.weight.copy_(torch.cat(w_qs, dim=1).T)  # the transpose is right
    return layer


def pack_without_head_dim_by_assignment(w_qs, w_ks, w_vs, w_o):
    """Wrong: forgets head_dim and replaces the weights, so nothing raises while building."""
    d, _ = w_qs[0].shape
    layer = mha.MultiHeadAttention(d, len(w_qs), bias=False)
    layer.q_proj.weight = torch.nn.Parameter(torch.cat(w_qs, dim=1).T.contiguous())
    return layer


def test_check_4_1_blames_a_missing_head_dim_not_the_transpose():
    for answer in (pack_without_head_dim, pack_without_head_dim_by_assignment):
        result = mha.checks.ch04.pack_heads(answer)
        assert result.status == "wrong"
        assert "pass head_dim=4" in result.message, result.message
        assert "the transpose" not in result.message, result.message
    # a transpose missed with head_dim given is still blamed on the transpose
    transposed = mha.checks.ch04.pack_heads(pack_without_transpose)
    assert "the transpose" in transposed.message and "head_dim" not in transposed.message


# --- 4.2: nn.MultiheadAttention's masks into the course's convention ---

def mask_solution(key_padding_mask, attn_mask):
    allowed = torch.ones(1, 1, 1, 1, dtype=torch.bool)
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    if attn_mask is not None:
        allowed = allowed & ~attn_mask
    return allowed


def mask_not_inverted(key_padding_mask, attn_mask):
    return ~mask_solution(key_padding_mask, attn_mask)


def test_check_4_2():
    assert mha.checks.ch04.course_mask(mask_solution).status == "correct"
    assert mha.checks.ch04.course_mask(mask_not_inverted).status == "wrong"
