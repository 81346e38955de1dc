"""The exercise checks of chapter 5 accept the reference solutions and reject wrong ones."""

import math

import pytest
import torch

from mha.checks import ch05

pytestmark = pytest.mark.chapter(5)


def test_check_quadratic_scores():
    def right(delta, centre, alpha):
        return -alpha * (delta.pow(2).sum(-1) - 2 * (delta * centre).sum(-1))

    def forgot_the_two(delta, centre, alpha):
        return -alpha * (delta.pow(2).sum(-1) - (delta * centre).sum(-1))

    assert ch05.quadratic_scores(right).status == "correct"
    assert ch05.quadratic_scores(forgot_the_two).status == "wrong"


def test_check_quadratic_scores_grades_size_one_and_empty_offsets_hidden():
    from mha.exercises import LocalChannel, evaluate, set_grading_seed

    def squeezed(delta, centre, alpha):  # right for the shapes the notebook shows
        return (-alpha * (delta.pow(2).sum(-1) - 2 * (delta * centre).sum(-1))).squeeze()

    shown = ch05.quadratic_scores(squeezed)
    assert (shown.status, shown.points, shown.max_points) == ("correct", 0.75, 0.75)
    set_grading_seed(7)
    try:
        graded = evaluate(ch05.quadratic_scores.checker, "5.2", 1,
                          LocalChannel(squeezed).answer())
    finally:
        set_grading_seed(None)
    assert graded.points == 0.75 and "(1, 1, 2)" in graded.message


def test_check_kernel_from_attention():
    def right(layer):
        k = math.isqrt(layer.num_heads)
        d = layer.head_dim
        v = layer.attn.v_proj.weight.reshape(layer.num_heads, d, layer.in_channels)
        o = layer.attn.out_proj.weight.reshape(layer.out_channels, layer.num_heads, d)
        taps = torch.einsum("ohd,hdc->hoc", o, v)
        return taps.reshape(k, k, layer.out_channels, layer.in_channels).permute(2, 3, 0, 1)

    def transposed(layer):
        return right(layer).transpose(2, 3)

    assert ch05.kernel_from_attention(right).status == "correct"
    assert ch05.kernel_from_attention(transposed).status == "wrong"
