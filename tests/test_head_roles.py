"""Head confidence and Voita et al.'s positional-head criterion."""

import pytest
import torch

import mha
from mha.analysis import head_roles

pytestmark = [pytest.mark.chapter(7), pytest.mark.chapter(8)]  # make chapter runs it (issue 38)


def previous_token_weights(batch, n, sharp=1.0):
    """Each query puts `sharp` on the previous token (the first on itself), the rest evenly."""
    w = torch.full((batch, 1, n, n), (1 - sharp) / (n - 1), dtype=torch.float64)
    target = torch.clamp(torch.arange(n) - 1, min=0)
    w[:, 0, torch.arange(n), target] = sharp
    return w


def test_previous_token_head_is_positional_with_offset_minus_one():
    w = previous_token_weights(3, 10, sharp=0.8)
    offsets, shares = mha.relative_offsets(w)
    assert offsets.tolist() == [-1]
    assert shares.item() == pytest.approx(27 / 30)  # query 0 attends to itself: offset 0
    assert mha.positional_heads(w, threshold=0.9) == [(0, -1, pytest.approx(0.9))]
    assert mha.head_confidence(w).item() == pytest.approx(0.8)


def test_uniform_head_has_confidence_one_over_n_and_padding_is_ignored():
    n = 6
    w = torch.full((2, 2, n, n), 1 / n, dtype=torch.float64)
    torch.testing.assert_close(mha.head_confidence(w), torch.full((2,), 1 / n, dtype=w.dtype))
    # padding: the last two tokens of the first sequence are padding and get the largest weight;
    # with the mask they must not count, without it they do
    w = previous_token_weights(2, n, sharp=0.7)
    w[0, 0, :, 4:] = 0.9
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 4:] = False
    _, shares_masked = mha.relative_offsets(w, mask)
    _, shares_all = mha.relative_offsets(w)
    assert shares_masked.item() == pytest.approx(8 / 10)
    assert shares_all.item() < shares_masked.item()


def test_confidence_against_a_loop():
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 5, dtype=torch.float64), dim=-1)
    mask = torch.rand(2, 5) < 0.7
    mask[:, 0] = True
    expected = [
        sum(w[b, h, i].max().item() for b in range(2) for i in range(5) if mask[b, i])
        / mask.sum().item()
        for h in range(3)
    ]
    torch.testing.assert_close(mha.head_confidence(w, mask), torch.tensor(expected, dtype=w.dtype))


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"\(batch, heads, n, n\)"):
        mha.head_confidence(torch.rand(2, 3, 4, 5))
    with pytest.raises(ValueError, match="token_mask must be a bool tensor of shape"):
        mha.relative_offsets(torch.rand(2, 3, 4, 4), torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="threshold"):
        mha.positional_heads(torch.rand(1, 1, 3, 3), threshold=1.5)


def test_head_confidence_refuses_a_sequence_with_no_key_allowed():
    """A key_mask row with no True key counted 0 for each of that sequence's queries and
    halved the confidence (0.46 -> 0.23), silently."""
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 5), -1)
    km = torch.ones(2, 5, dtype=torch.bool)
    km[1] = False
    with pytest.raises(ValueError, match="key_mask row 1 has no True key"):
        head_roles.head_confidence(w, None, km)
    # leaving that sequence out of token_mask is the documented way: it equals batch 0 alone
    tm = torch.ones(2, 5, dtype=torch.bool)
    tm[1] = False
    torch.testing.assert_close(head_roles.head_confidence(w, tm, km),
                               w[0].max(dim=-1).values.mean(dim=-1))


def many_queries_weights(batch=32768, sharp=0.75):
    """(batch, 1, 2, 2) weights, every row (sharp, 1 - sharp): batch * 2 = 65,536 real queries,
    more than float16's largest number (65,504)."""
    row = torch.tensor([sharp, 1 - sharp], dtype=torch.float64)
    return row.expand(batch, 1, 2, 2).contiguous()


def test_head_confidence_counts_more_queries_than_float16_holds():
    """Counted in float16, 65,536 queries were inf and every head scored 0, silently."""
    w = many_queries_weights()
    # by hand: every query's largest weight is 0.75, so the mean is 0.75
    reference = w.max(dim=-1).values.mean()  # float64
    got = mha.head_confidence(w.half())
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.double(), reference.reshape(1), rtol=0, atol=1e-3)


def test_mean_share_on_keys_counts_more_queries_than_float16_holds():
    """attention_to, the same count: 65,536 queries in float16 gave 0 for every head."""
    from mha.models.pretrained import attention_to

    w = many_queries_weights()
    key_mask = torch.zeros(w.shape[0], 2, dtype=torch.bool)
    key_mask[:, 0] = True
    # by hand: every query puts 0.75 on key 0
    got = attention_to(w.half(), key_mask)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.double(), torch.tensor([0.75], dtype=torch.float64),
                               rtol=0, atol=1e-3)
