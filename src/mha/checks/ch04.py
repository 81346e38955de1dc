"""Checks for the exercises of chapter 4 (multi-head attention)."""

from __future__ import annotations

import math

import torch

from mha.exercises import AnswerRaised, Wrong, exercise_check, expect_close, is_instance, seed
from mha.layers.multi_head import MultiHeadAttention


@exercise_check("4.1", reference_names=("mha.checks.ch04",))  # no mha callable solves it
def pack_heads(answer) -> None:
    """``answer(w_qs, w_ks, w_vs, w_o)`` must return an ``mha.MultiHeadAttention`` (no biases)
    computing ``Concat_i(softmax(X W_Q,i (X W_K,i)^T / sqrt(d_k)) X W_V,i) W_O``."""
    g = torch.Generator().manual_seed(seed(41))
    d, h, dk = 6, 3, 4  # h * d_k != d on purpose
    w_qs = [torch.randn(d, dk, generator=g) for _ in range(h)]
    w_ks = [torch.randn(d, dk, generator=g) for _ in range(h)]
    w_vs = [torch.randn(d, dk, generator=g) for _ in range(h)]
    w_o = torch.randn(h * dk, d, generator=g)
    x = torch.randn(2, 5, d, generator=g)
    # the reference first, from the check's own tensors; the answer gets copies of them
    x64 = x.double()
    heads, expected_weights = [], []
    for w_q, w_k, w_v in zip(w_qs, w_ks, w_vs, strict=True):
        scores = (x64 @ w_q.double()) @ (x64 @ w_k.double()).transpose(-2, -1) / math.sqrt(dk)
        a = torch.softmax(scores, dim=-1)
        heads.append(a @ (x64 @ w_v.double()))
        expected_weights.append(a)
    expected_out = torch.cat(heads, dim=-1) @ w_o.double()
    given = (f"{h} heads with W_Q,i, W_K,i and W_V,i of shape ({d}, {dk}) and W_O of shape "
             f"({h * dk}, {d})")
    try:
        layer = answer(w_qs, w_ks, w_vs, w_o)
    except AnswerRaised as raised:
        if raised.name != "RuntimeError" or "size" not in raised.message:
            raise
        if _rows_are_d(raised.message, d, h * dk):
            raise Wrong(f"pack_heads raised RuntimeError for {given}: {raised.message}. "
                        f"{_HEAD_DIM.format(d=d, h=h, dk=dk, hdk=h * dk, default=d // h)}"
                        ) from None
        raise Wrong(f"pack_heads raised RuntimeError for {given}: {raised.message}. "
                    f"{_PROJECTION_SHAPES.format(hdk=h * dk, d=d)}") from None
    if not is_instance(layer, MultiHeadAttention):
        raise Wrong(f"expected an mha.MultiHeadAttention, got {type(layer).__name__}")
    if (layer.num_heads, layer.head_dim) != (h, dk):
        hint = f" (pass head_dim={dk})" if layer.num_heads == h else ""
        raise Wrong(f"expected {h} heads of size {dk}, got {layer.num_heads} of size "
                    f"{layer.head_dim}{hint}")
    try:
        out, weights = layer(x)
    except AnswerRaised as raised:
        shapes = ", ".join(f"{name}.weight {_shape(layer, name)}"
                           for name in ("q_proj", "k_proj", "v_proj", "out_proj"))
        raise Wrong(f"calling your layer on x of shape {tuple(x.shape)} raised {raised.name}: "
                    f"{raised.message}. Its projections have {shapes}; "
                    f"{_PROJECTION_SHAPES.format(hdk=h * dk, d=d)}") from None
    # tolerance: expect_close's default (atol 1e-5, rtol 1e-4): the layer runs in float32,
    # whose rounding of these weights and outputs stays below 1e-5
    expect_close("each head's attention weights", weights, torch.stack(expected_weights, 1))
    expect_close("the output", out, expected_out)


# what nn.Linear needs, said when a shape is wrong
_PROJECTION_SHAPES = ("nn.Linear stores its weight as (out_features, in_features): q_proj, "
                      "k_proj and v_proj need ({hdk}, {d}), the transpose of the heads' "
                      "matrices side by side, and out_proj needs ({d}, {hdk}), W_O transposed")


# what is wrong when the layer was built without head_dim
_HEAD_DIM = ("Your layer's projections have {d} output features, not h * d_k = {hdk}: "
             "MultiHeadAttention({d}, {h}) makes heads of size d / h = {default} unless told "
             "otherwise; pass head_dim={dk}")


def _rows_are_d(message: str, d: int, hdk: int) -> bool:
    """Whether a copy failed because the layer's weight has d rows where h * d_k were given
    (torch says: tensor a, the layer's, has d at dimension 0, tensor b has h * d_k)."""
    return (f"tensor a ({d}) must match the size of tensor b ({hdk}) at non-singleton "
            f"dimension 0") in message


def _shape(layer, name: str) -> str:
    try:
        return str(tuple(getattr(layer, name).weight.shape))
    except Exception:  # noqa: BLE001 (a layer without it: say so)
        return "(missing)"


def _check_course_masks(answer, cases, batch: int, n_q: int, n_k: int) -> None:
    """Exact comparison: a mask is bools, there is nothing to round."""
    for name, kpm, am, expected in cases:
        got = answer(kpm, am)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
            raise Wrong(f"{name}: expected a bool tensor, got "
                        f"{getattr(got, 'dtype', type(got).__name__)}")
        if got.dim() == 3:
            raise Wrong(f"{name}: a 3-D mask {tuple(got.shape)} is ambiguous; use 4-D")
        try:
            got_full = torch.broadcast_to(got, (batch, 1, n_q, n_k))
        except RuntimeError:
            raise Wrong(f"{name}: a mask of shape {tuple(got.shape)} does not broadcast to "
                        f"(B, 1, n_q, n_k) = {(batch, 1, n_q, n_k)}") from None
        wrong = (got_full != expected.expand(batch, 1, n_q, n_k)).sum().item()
        if wrong:
            raise Wrong(f"{name}: {wrong} of {batch * n_q * n_k} entries differ "
                        f"(remember: True means may attend)")


@exercise_check("4.2", points=0.5, part="either mask, and both",
                reference_names=("mha.checks.ch04",))  # no mha callable solves it
def course_mask(answer) -> None:
    """``answer(key_padding_mask, attn_mask)`` must turn nn.MultiheadAttention's bool masks
    (True = do not attend; either may be None) into one course mask (True = may attend)
    of shape ``(B, 1, n_q, n_k)``."""
    g = torch.Generator().manual_seed(seed(42))
    batch, n_q, n_k = 3, 4, 5
    padding = torch.rand(batch, n_k, generator=g) < 0.3
    blocked = torch.rand(n_q, n_k, generator=g) < 0.3
    _check_course_masks(answer, [
        ("key_padding_mask only", padding, None, ~padding[:, None, None, :]),
        ("attn_mask only", None, blocked, ~blocked.expand(1, 1, n_q, n_k)),
        ("both masks", padding, blocked, ~(padding[:, None, None, :] | blocked)),
    ], batch, n_q, n_k)


@course_mask.part("rows with no key allowed (all False)", points=0.5, hidden=True)
def _all_false_rows(answer) -> None:
    # A fully padded sequence and a query whose every key is blocked: their rows of the course
    # mask are all False. The translation stays elementwise; an answer that "repairs" such rows
    # (lets them attend somewhere, to avoid a NaN) changes what the masks say.
    g = torch.Generator().manual_seed(seed(1042))
    batch, n_q, n_k = 3, 4, 5
    padding = torch.rand(batch, n_k, generator=g) < 0.3
    padding[int(torch.randint(0, batch, (), generator=g))] = True
    blocked = torch.rand(n_q, n_k, generator=g) < 0.3
    blocked[int(torch.randint(0, n_q, (), generator=g))] = True
    _check_course_masks(answer, [
        ("a fully padded sequence", padding, None, ~padding[:, None, None, :]),
        ("a query with every key blocked", None, blocked, ~blocked.expand(1, 1, n_q, n_k)),
        ("both, with rows of no key", padding, blocked, ~(padding[:, None, None, :] | blocked)),
    ], batch, n_q, n_k)
