"""The exercise checks of chapter 3 accept the reference solutions and reject wrong ones."""

import pytest
import torch

import mha
import mha.checks.ch03

pytestmark = pytest.mark.chapter(3)

# --- 3.1: the seed's matrices into mha.SelfAttention ---

def matrices_solution(w_q, w_k, w_v):
    layer = mha.SelfAttention(w_q.shape[0], key_dim=w_q.shape[1], value_dim=w_v.shape[1])
    with torch.no_grad():  # nn.Linear stores W^T
        layer.w_q.weight.copy_(w_q.T)
        layer.w_k.weight.copy_(w_k.T)
        layer.w_v.weight.copy_(w_v.T)
    return layer


def matrices_swapped_q_and_k(w_q, w_k, w_v):
    return matrices_solution(w_k, w_q, w_v)


def test_check_3_1():
    assert mha.checks.ch03.self_attention_from_matrices(matrices_solution).status == "correct"
    assert mha.checks.ch03.self_attention_from_matrices(matrices_swapped_q_and_k).status == "wrong"

    def not_done(w_q, w_k, w_v):
        raise NotImplementedError()

    assert mha.checks.ch03.self_attention_from_matrices(not_done).status == "not done"


# --- 3.3: the best per-token projection ---

def projection_solution(x, target):
    rows = torch.cat([x.reshape(-1, x.shape[-1]), torch.ones(x.shape[0] * x.shape[1], 1)], 1)
    flat = target.reshape(-1, target.shape[-1])
    solution = torch.linalg.lstsq(rows.double(), flat.double(), driver="gelsd").solution
    return (rows.double() @ solution - flat.double()).square().mean().item()


def projection_without_bias(x, target):
    rows = x.reshape(-1, x.shape[-1]).double()
    flat = target.reshape(-1, target.shape[-1]).double()
    solution = torch.linalg.lstsq(rows, flat, driver="gelsd").solution
    return (rows @ solution - flat).square().mean().item()


def test_check_3_3():
    assert mha.checks.ch03.best_projection_error(projection_solution).status == "correct"
    assert mha.checks.ch03.best_projection_error(projection_without_bias).status == "wrong"


def test_check_3_1_names_a_missing_transpose():
    def without_transpose(w_q, w_k, w_v):
        return matrices_solution(w_q.T, w_k.T, w_v.T)

    result = mha.checks.ch03.self_attention_from_matrices(without_transpose)
    assert result.status == "wrong" and "RuntimeError for W_Q and W_K of shape (5, 3)" in (
        result.message) and "(out_features, in_features)" in result.message
