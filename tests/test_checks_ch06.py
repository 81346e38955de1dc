"""The checks of chapter 6's exercises accept the reference solutions and reject wrong ones."""

import pytest
import torch

import mha
from mha.checks import ch06

pytestmark = pytest.mark.chapter(6)  # make chapter CHAPTER=06 runs these


def rope_complex(x, positions):  # the reference solution
    d = x.shape[-1]
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    turn = torch.polar(torch.ones_like(omega), positions.to(x.dtype)[:, None] * omega)
    return torch.view_as_real(z * turn).reshape(x.shape)


def merge_partials(m1, l1, o1, m2, l2, o2):  # the reference solution
    m = torch.maximum(m1, m2)
    a, b = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, a * l1 + b * l2, a * o1 + b * o2


def test_rope_check_accepts_the_solution_and_rejects_wrong_ones():
    assert ch06.rope_complex(rope_complex).status == "correct"
    assert ch06.rope_complex(lambda x, p: mha.apply_rotary(x, p)).status == "correct"
    # rotating the wrong way (by -p omega) is wrong
    assert ch06.rope_complex(lambda x, p: rope_complex(x, -p)).status == "wrong"
    # pairing the first and second halves (the GPT-NeoX layout) is another rotation: wrong here
    def halves(x, p):
        d = x.shape[-1]
        y = torch.cat([x[..., 0::2], x[..., 1::2]], -1)
        y = rope_complex(y, p)
        out = torch.empty_like(x)
        out[..., 0::2], out[..., 1::2] = y[..., : d // 2], y[..., d // 2:]
        return out
    assert ch06.rope_complex(halves).status == "wrong"
    assert ch06.rope_complex(lambda x, p: rope_complex(x.float(), p)).status == "wrong"


def test_merge_check_accepts_the_solution_and_rejects_wrong_ones():
    assert ch06.merge_partials(merge_partials).status == "correct"

    def no_rescale(m1, l1, o1, m2, l2, o2):  # forgets to rescale to the common maximum
        return torch.maximum(m1, m2), l1 + l2, o1 + o2

    def unstable(m1, l1, o1, m2, l2, o2):  # undoes the shift: right in exact arithmetic only
        m = torch.zeros_like(m1)
        return m, torch.exp(m1) * l1 + torch.exp(m2) * l2, torch.exp(m1) * o1 + torch.exp(m2) * o2

    assert ch06.merge_partials(no_rescale).status == "wrong"
    assert ch06.merge_partials(unstable).status in {"wrong", "error"}
    assert ch06.merge_partials(lambda *args: args[:2]).status == "wrong"


def test_checks_say_not_done_for_the_student_edition():
    def todo(*args):
        raise NotImplementedError()

    assert ch06.rope_complex(todo).status == "not done"
    assert ch06.merge_partials(todo).status == "not done"
