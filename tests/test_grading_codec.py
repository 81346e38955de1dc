"""The plain data that crosses between a check and the student's answer (mha.exercises).

Values round-trip exactly (every dtype, NaN and infinities included), tensor subclasses arrive as
plain tensors, anything that is not of the expected form is refused, and the hidden seed differs
from the notebook's only under grading.
"""

import json
import math

import pytest
import torch

import mha.checks.ch00 as ch00
from mha.exercises import (
    DTYPES,
    LocalChannel,
    ProtocolError,
    Ref,
    call_seeing_inputs,
    decode,
    dumps,
    encode,
    is_instance,
    loads,
    seed,
    set_grading_seed,
)
from mha.layers.single_head import SelfAttention


def no_refs(ref, types):
    raise AssertionError("no ref expected")


def roundtrip(value):
    return decode(loads(dumps({"v": encode(value)}))["v"], no_refs)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_tensors_of_every_dtype_roundtrip_exactly(name):
    dtype = DTYPES[name]
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        x = torch.rand(3, 4, generator=g) > 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        x = (torch.randn(3, 4, generator=g, dtype=torch.float64) * 1e3).to(dtype)
        if dtype.is_floating_point:
            x[0, 0], x[0, 1], x[0, 2] = math.nan, math.inf, -math.inf
    else:
        x = torch.randint(-100 if dtype != torch.uint8 else 0, 100, (3, 4), generator=g).to(dtype)
    y = roundtrip(x)
    assert type(y) is torch.Tensor and y.dtype == x.dtype and y.shape == x.shape
    assert torch.equal(torch.view_as_real(y) if dtype.is_complex else y.nan_to_num(),
                       torch.view_as_real(x) if dtype.is_complex else x.nan_to_num())


def test_containers_keep_their_kind_and_int_keys():
    value = {2: (1, 2.5, [True, None, "s"]), 3: torch.zeros(0, 2)}
    back = roundtrip(value)
    assert back.keys() == {2, 3} and back[2] == (1, 2.5, [True, None, "s"])
    assert back[3].shape == (0, 2)


def test_a_tensor_subclass_arrives_as_a_plain_tensor_with_its_real_values():
    class Agreeable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("tolist", "allclose", "equal"):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.arange(6.0).reshape(2, 3).as_subclass(Agreeable)
    y = roundtrip(x)
    assert type(y) is torch.Tensor
    assert torch.equal(y, torch.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("plain", [
    {"tensor": "float32", "shape": [2], "data": [1.0]},  # data does not match the shape
    {"tensor": "object", "shape": [1], "data": [1]},  # no such dtype
    {"tensor": "int64", "shape": [1], "data": [1.5]},
    {"tensor": "bool", "shape": [1], "data": [1]},
    {"tensor": "float32", "shape": [-1], "data": []},
    {"tensor": "float32", "shape": [10**9], "data": []},
    {"tuple": [1], "extra": 2},
    {"pickle": "gASVAAAAAAAAAAA="},
    {"dict": [[1]]},
    {"ref": "0", "types": []},
])
def test_data_of_another_form_is_refused(plain):
    with pytest.raises(ProtocolError):
        decode(plain, no_refs)


def test_nesting_and_size_are_bounded():
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ProtocolError):
        encode(deep)
    with pytest.raises(ProtocolError):
        loads(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ProtocolError):
        encode(torch.zeros(5_000_000))


def test_an_object_that_is_not_data_is_a_ref_that_answers_through_the_channel():
    layer = SelfAttention(4, 3)
    ref = LocalChannel(lambda: layer).answer()()
    assert isinstance(ref, Ref) and type(ref).__name__ == "SelfAttention"
    assert is_instance(ref, SelfAttention) and not is_instance(ref, torch.Tensor)
    out, weights = ref(torch.randn(1, 5, 4))
    assert type(out) is torch.Tensor and out.shape[:2] == (1, 5) and weights.shape == (1, 5, 5)
    assert ref.training is True


def test_an_answer_that_changes_its_input_in_place_never_changes_the_checks_copy():
    def doubles_in_place(x, xs):
        x.mul_(2)
        xs[0].zero_()
        xs.append(torch.ones(1))
        return x

    x, xs = torch.ones(3), [torch.ones(2)]
    answer = LocalChannel(doubles_in_place).answer()
    assert torch.equal(answer(x, xs), torch.full((3,), 2.0))
    assert torch.equal(x, torch.ones(3)) and len(xs) == 1 and torch.equal(xs[0], torch.ones(2))
    # a check that wants to know can see what the answer did, as new values
    result, after = call_seeing_inputs(answer, x, xs)
    assert torch.equal(after[0], torch.full((3,), 2.0)) and len(after[1]) == 2
    assert torch.equal(x, torch.ones(3)) and len(xs) == 1


def test_the_hidden_seed_is_the_notebooks_until_the_grader_sets_one():
    assert seed(12) == 12
    try:
        set_grading_seed(5)
        first = seed(12)
        assert first != 12 and seed(12) == first and seed(13) != first
        set_grading_seed(6)
        assert seed(12) != first
    finally:
        set_grading_seed(None)
    assert seed(12) == 12


def test_each_call_of_a_check_under_grading_draws_inputs_of_its_own():
    """Attack 50: the inputs of every call of a check were the same in one grading run, so an
    answer could record them and have a cell outside the watch compute their results. Under
    grading, seed_of_call gives each call its own seed (the same call, the same seed: a run
    is reproducible), and the run's seed back after; in a notebook nothing changes."""
    from mha.exercises import seed_of_call

    with seed_of_call("0:1"):
        assert seed(12) == 12
    try:
        set_grading_seed(5)
        run = seed(12)
        seeds = []
        for call in ("0:1", "0:2", "1:1", "0:1"):
            with seed_of_call(call):
                seeds.append(seed(12))
            assert seed(12) == run
        assert len(set(seeds[:3] + [run])) == 4 and seeds[3] == seeds[0]
    finally:
        set_grading_seed(None)


def test_in_a_notebook_a_subclass_that_agrees_with_everything_still_fails(capsys):
    class Agreeable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("allclose", "equal", "__eq__", "__ne__"):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    result = ch00.scaled_scores(lambda q, k: (q @ k.T).as_subclass(Agreeable))
    # the check saw the plain values: q k^T without its 1 / sqrt(d_k = 4)
    assert result.status == "wrong" and "too large by a factor of 2" in result.message


def test_messages_are_json_lines():
    line = dumps({"value": encode([math.nan, 1])})
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert math.isnan(json.loads(line)["value"][0])
