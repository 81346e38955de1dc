"""The lab's sentence-similarity set: size, grades, split."""

from collections import Counter

import pytest

from mha.tasks.similarity_pairs import GROUPS, similarity_pairs

pytestmark = pytest.mark.chapter(8)  # make chapter runs this file (issue 38)


def test_at_least_100_pairs_with_every_grade_equally_often():
    pairs = similarity_pairs()
    assert len(pairs) >= 100
    grades = Counter(g for _, _, g in pairs)
    assert sorted(grades) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert len(set(grades.values())) == 1


def test_no_pair_repeats_and_no_sentence_is_paired_with_itself():
    pairs = similarity_pairs()
    assert len({(a, b) for a, b, _ in pairs}) == len(pairs)
    assert all(a != b for a, b, _ in pairs)


def test_calibration_and_evaluation_are_disjoint_halves():
    calibration, evaluation = similarity_pairs("calibration"), similarity_pairs("evaluation")
    assert len(calibration) == len(evaluation) == len(similarity_pairs()) // 2
    sentences = [{s for a, b, _ in half for s in (a, b)} for half in (calibration, evaluation)]
    assert not sentences[0] & sentences[1]
    assert sorted(calibration + evaluation) == sorted(similarity_pairs())


def test_groups_are_well_formed():
    for base, partners in GROUPS:
        assert base.endswith(".") and len(partners) == 6


def test_bad_split():
    with pytest.raises(ValueError, match="split must be one of"):
        similarity_pairs("test")
