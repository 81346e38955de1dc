"""Pruning orders and curves, and the look-up task's answers."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(7)  # make chapter runs this file (issue 38)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=6, max_size=6))
def test_pruning_order_sorts_scores_ascending_with_stable_ties(values):
    scores = torch.tensor(values, dtype=torch.float64).reshape(2, 3)
    expected = sorted([(la, h) for la in range(2) for h in range(3)],
                      key=lambda lh: (values[lh[0] * 3 + lh[1]], lh))
    assert mha.pruning_order(scores) == expected


def test_masks_along_remove_one_more_head_per_row():
    order = [(1, 2), (0, 0), (1, 0)]
    masks = mha.masks_along(order, (2, 3))
    assert masks.shape == (4, 2, 3)
    assert (masks.sum(dim=(1, 2)) == torch.tensor([6.0, 5.0, 4.0, 3.0])).all()
    assert masks[2, 0, 0] == 0 and masks[2, 1, 2] == 0 and masks[2, 1, 0] == 1
    with pytest.raises(ValueError, match="distinct"):
        mha.masks_along([(0, 0), (0, 0)], (2, 3))
    with pytest.raises(ValueError, match="inside"):
        mha.masks_along([(2, 0)], (2, 3))


def test_pruning_curve_evaluates_each_mask():
    seen = []
    curve = mha.pruning_curve(lambda m: seen.append(m.clone()) or float(m.sum()), [(0, 1), (0, 0)],
                              (1, 2))
    assert curve == [2.0, 1.0, 0.0] and len(seen) == 3


def test_pruning_curve_refuses_a_nan_score_naming_the_mask():
    # a nan point in a curve passes for a number; bits_per_byte refuses its nan loss too
    calls = []
    with pytest.raises(ValueError, match=r"evaluate returned nan .* 1 head\(s\) removed"):
        mha.pruning_curve(lambda m: calls.append(m) or (1.0 if len(calls) == 1 else float("nan")),
                          [(0, 1), (0, 0)], (1, 2))


def test_token_accuracy_counts_a_single_inf_and_refuses_a_tie_of_infs():
    """argmax of a row of all +inf is class 0: a tie the model did not break. A lone +inf
    is a prediction like any largest score; a loop over the rows is the reference."""
    logits = torch.tensor([[[0.0, float("inf"), 1.0], [2.0, 1.0, float("-inf")],
                            [float("-inf"), 0.5, 3.0]]])
    targets = torch.tensor([[1, 0, 1]])
    expected = sum(int(row.argmax()) == int(t) for row, t in zip(logits[0], targets[0],
                                                                    strict=True)) / 3
    assert mha.token_accuracy(logits, targets) == pytest.approx(expected)
    for tie in ([float("inf")] * 3, [float("-inf")] * 3, [float("inf"), 0.0, float("inf")]):
        tied = logits.clone()
        tied[0, 2] = torch.tensor(tie)
        with pytest.raises(ValueError, match="shared by several classes"):
            mha.token_accuracy(tied, targets)


def test_iterative_order_adapts_where_one_shot_cannot():
    """Two redundant heads (0 and 1) each look unimportant while the other is present."""
    def importance(mask):
        # head 0 and head 1 back each other up; head 2 is moderately important on its own
        s = torch.tensor([[0.1, 0.1, 0.5]])
        if mask[0, 0] == 0:
            s[0, 1] = 1.0
        if mask[0, 1] == 0:
            s[0, 0] = 1.0
        return s

    one_shot = mha.pruning_order(importance(torch.ones(1, 3)))
    iterative = mha.iterative_pruning_order(importance, (1, 3))
    assert one_shot == [(0, 0), (0, 1), (0, 2)]
    assert iterative == [(0, 0), (0, 2), (0, 1)]
    # with scores that do not depend on the mask, the two orders agree
    fixed = torch.tensor([[0.3, 0.2], [0.9, 0.1]])
    assert mha.iterative_pruning_order(lambda m: fixed, (2, 2)) == mha.pruning_order(fixed)


def test_pruning_curves_take_the_models_dtype():
    """A float64 model's head_mask refuses float32 masks: dtype= passes its own, and without it
    the message points to dtype= rather than to a head_mask the caller never passed."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)

    def evaluate(mask):
        return float(layer(x, head_mask=mask[0])[0].detach().abs().sum())

    def importance(mask):
        return torch.stack([layer(x, head_mask=mask[0] * (1 - torch.eye(2, dtype=mask.dtype)[h])
                                  )[0].detach().abs().sum() for h in range(2)])[None]

    expected = [evaluate(torch.tensor([[1.0, 1.0]], dtype=torch.float64)),
                evaluate(torch.tensor([[0.0, 1.0]], dtype=torch.float64))]
    assert mha.pruning_curve(evaluate, [(0, 0)], (1, 2), dtype=torch.float64) == expected
    assert mha.masks_along([(0, 0)], (1, 2), dtype=torch.float64).dtype == torch.float64
    assert mha.iterative_pruning_order(importance, (1, 2), dtype=torch.float64) == \
        mha.pruning_order(importance(torch.ones(1, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"pass the model's dtype as dtype="):
        mha.pruning_curve(evaluate, [(0, 0)], (1, 2))
    with pytest.raises(ValueError, match=r"pass the model's dtype as dtype="):
        mha.iterative_pruning_order(importance, (1, 2))
    with pytest.raises(ValueError, match="dtype must be a floating"):
        mha.masks_along([(0, 0)], (1, 2), dtype=torch.int64)


def test_lookup_targets_against_a_loop():
    tokens, targets = mha.lookup_batch(20, 7, 5, torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (20, 8)
    assert (tokens[:, 0] == 5).all() and (targets[:, 0] == mha.tasks.neighbour_task.IGNORE).all()
    for b in range(20):
        x = tokens[b, 1:].tolist()
        for i in range(7):
            repeated = x.count(x[i]) > 1
            assert targets[b, 1 + i] == (x[i - 1] if repeated else x[(i + 1) % 7])
    # the accuracy skips the start position
    logits = torch.nn.functional.one_hot(targets.clamp_min(0), 5).double()
    logits[0, 1] = -logits[0, 1]  # one wrong answer out of 140
    assert mha.token_accuracy(logits, targets) == pytest.approx(139 / 140)
    with pytest.raises(ValueError, match="seq_len must be an int >= 3, got 2"):
        mha.lookup_batch(2, 2, 5, torch.Generator())
    with pytest.raises(ValueError, match=r"targets must have the shape \(B, n\) = \(2, 3\) of "
                       r"logits \(2, 3, 4\) .* got \(2, 4\)"):
        mha.token_accuracy(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))


def test_same_token_weight_against_a_loop():
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, (2, 5), generator=gen)
    weights = torch.softmax(torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64), -1)
    expected = torch.zeros(3, dtype=torch.float64)
    for h in range(3):
        for b in range(2):
            for i in range(5):
                expected[h] += sum(weights[b, h, i, j] for j in range(5)
                                   if j != i and tokens[b, j] == tokens[b, i]) / 10
    torch.testing.assert_close(mha.same_token_weight(weights, tokens), expected)
    # a head that puts all its weight on the query itself never counts
    eye = torch.eye(5, dtype=torch.float64).expand(2, 1, 5, 5)
    assert mha.same_token_weight(eye, tokens).item() == 0.0
    with pytest.raises(ValueError, match=r"tokens must be an integer tensor of shape \(2, 5\)"):
        mha.same_token_weight(weights, tokens[:, :4])


def test_iterative_order_with_an_infinite_score_never_repeats_a_head():
    """A live head scored +inf used to tie with the removed heads (masked with +inf): the
    stable sort took a removed head again, and the order repeated (0, 0) and missed (0, 1)."""
    fixed = torch.tensor([[1.0, float("inf")], [2.0, 3.0]])
    order = mha.iterative_pruning_order(lambda m: fixed, (2, 2))
    # fixed scores: the order is the one-shot ranking (sorted by hand: inf is last)
    assert order == [(0, 0), (1, 0), (1, 1), (0, 1)]
    ninf = torch.tensor([[0.0, float("-inf")], [float("-inf"), 1.0]])
    assert mha.iterative_pruning_order(lambda m: ninf, (2, 2)) == [(0, 1), (1, 0), (0, 0), (1, 1)]


def test_iterative_order_names_importance_for_a_nan_score():
    def importance(mask):  # NaN for head (1, 0) once the first head is gone
        s = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
        if mask[0, 0] == 0:
            s[1, 0] = float("nan")
        return s
    with pytest.raises(ValueError, match=r"importance\(mask\) returned NaN for the live head "
                                         r"\(1, 0\)"):
        mha.iterative_pruning_order(importance, (2, 2))
    # a NaN for a removed head is ignored
    def removed_nan(mask):
        return torch.tensor([[0.0, 1.0]]).masked_fill(mask == 0, float("nan"))
    assert mha.iterative_pruning_order(removed_nan, (1, 2)) == [(0, 0), (0, 1)]


def test_dtype_hint_suggests_another_dtype_than_the_refused_one():
    layer = mha.MultiHeadAttention(8, 2)  # float32
    x = torch.randn(2, 3, 8)

    def evaluate(mask):
        return float(layer(x, head_mask=mask[0])[0].detach().abs().sum())

    with pytest.raises(ValueError, match=r"masks are torch.float64.*dtype=torch.float32\)"):
        mha.pruning_curve(evaluate, [(0, 0)], (1, 2), dtype=torch.float64)

    def loss_fn(batch, gates):  # tester 47: head_importance's hint repeated torch.float64
        return layer(x, head_mask=gates[0])[0].sum()

    with pytest.raises(ValueError, match=r"gates are torch.float64.*dtype=torch.float32\)"):
        mha.head_importance(loss_fn, [None], 1, 2, dtype=torch.float64)


def test_masks_along_explains_a_tensor_order():
    with pytest.raises(ValueError, match=r"got a tensor of shape \(1, 2\); pass order.tolist"):
        mha.masks_along(torch.tensor([[0, 1]]), (2, 2))
