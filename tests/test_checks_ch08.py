"""The lab's exercise checks accept the reference solutions and reject wrong ones."""

import pytest
import scipy.stats
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import mha.checks.ch08 as ch08
from mha.models.pretrained import mean_pool

pytestmark = pytest.mark.chapter(8)  # make chapter CHAPTER=08 runs these


def test_mean_pool_check_accepts_the_reference():
    assert ch08.mean_pool(mean_pool).status == "correct"


def test_mean_pool_check_rejects_a_mean_over_padding_too():
    def wrong(hidden, mask):
        return torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)

    result = ch08.mean_pool(wrong)
    assert result.status == "wrong" and "counts the padding tokens too" in result.message


def test_mean_pool_check_rejects_a_mean_without_normalising():
    def wrong(hidden, mask):
        m = mask[..., None].to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1)

    assert ch08.mean_pool(wrong).status == "wrong"


def reference_spearman(x, y):
    return scipy.stats.spearmanr(x.numpy(), y.numpy()).statistic


def test_spearman_check_accepts_the_reference():
    assert ch08.spearman(reference_spearman).status == "correct"


def test_spearman_check_rejects_ranks_without_averaging_ties():
    def wrong(x, y):
        rx = x.argsort().argsort().double()
        ry = y.argsort().argsort().double()
        return torch.corrcoef(torch.stack([rx, ry]))[0, 1]

    result = ch08.spearman(wrong)
    assert result.status == "wrong" and "ties" in result.message


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5)), min_size=3, max_size=12))
def test_the_checks_own_reference_equals_scipy(pairs):
    x = [float(a) for a, _ in pairs]
    y = [float(b) for _, b in pairs]
    assume(len(set(x)) > 1 and len(set(y)) > 1)  # undefined for a constant sequence
    ours = ch08._pearson(ch08._average_ranks(x), ch08._average_ranks(y))
    assert abs(ours - scipy.stats.spearmanr(x, y).statistic) < 1e-9
