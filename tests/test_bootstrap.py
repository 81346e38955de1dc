"""The paired bootstrap over groups (mha.bootstrap), against a direct computation."""

import numpy as np
import pytest
import scipy.stats

import mha

pytestmark = pytest.mark.chapter(8)  # make chapter runs this file (issue 38)


def data(seed=0, groups=5, size=4):
    rng = np.random.default_rng(seed)
    grades = np.tile(np.arange(size), groups).astype(float)          # ties across groups
    x = grades + rng.normal(size=grades.size)
    y = grades + 2 * rng.normal(size=grades.size)
    labels = rng.permutation(np.repeat(np.arange(groups) * 7, size))  # not contiguous
    return x, y, grades, labels


def test_matches_a_direct_loop_over_resampled_groups():
    x, y, grades, labels = data()
    result = mha.spearman_difference_bootstrap(x, y, grades, labels, draws=200, seed=3)
    names = np.unique(labels)
    pick = np.random.default_rng(3).integers(0, len(names), size=(200, len(names)))
    direct = []
    for row in pick:
        index = np.concatenate([np.flatnonzero(labels == names[g]) for g in row])
        direct.append(scipy.stats.spearmanr(x[index], grades[index]).statistic
                      - scipy.stats.spearmanr(y[index], grades[index]).statistic)
    np.testing.assert_allclose(result.draws, direct, rtol=0, atol=1e-12)
    observed = (scipy.stats.spearmanr(x, grades).statistic
                - scipy.stats.spearmanr(y, grades).statistic)
    assert result.difference == pytest.approx(observed, abs=1e-12)
    low, high = np.percentile(direct, [2.5, 97.5])
    assert (result.low, result.high) == pytest.approx((low, high), abs=1e-12)
    assert result.standard_error == pytest.approx(np.std(direct), abs=1e-12)


def test_pairing_makes_the_difference_less_noisy_than_each_correlation():
    x, y, grades, labels = data(groups=12, size=6)
    y = x + 0.05 * np.random.default_rng(1).normal(size=x.size)   # nearly the same model
    paired = mha.spearman_difference_bootstrap(x, y, grades, labels, seed=0)
    flat = mha.spearman_difference_bootstrap(x, grades[::-1].copy(), grades, labels, seed=0)
    assert paired.standard_error < flat.standard_error / 3


def test_rejects_unequal_groups_and_constant_grades():
    x, y, grades, labels = data()
    with pytest.raises(ValueError, match="same number of pairs"):
        mha.spearman_difference_bootstrap(x, y, grades, np.arange(x.size) // 3)
    with pytest.raises(ValueError, match="constant"):
        mha.spearman_difference_bootstrap(x, y, np.ones_like(grades), labels)
