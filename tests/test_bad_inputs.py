"""Bad input, tried as a student would: each call gives a clear error or a documented result.

The tables are ``tests/bad_inputs.py`` and the outsiders' fresh sets of issue #27,
``tests/bad_inputs_decoding.py`` and ``tests/bad_inputs_public_api.py``;
``tools/bad_input_tally.py`` counts their outcomes for any version of ``mha``. A row that
expects an error asserts its class and that the message holds the row's words (the argument's
name, and what was received); a row that expects a result asserts the documented result.
"""

import re

import numpy as np
import pytest
import torch
from bad_inputs import CASES, LAPTOP, Bad
from bad_inputs_decoding import CASES as DECODING_CASES
from bad_inputs_public_api import CASES as PUBLIC_API_CASES

import mha


def test_the_table_is_large_and_its_ids_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 146


def test_the_decoding_table_is_large_and_its_ids_new():
    ids = [case.id for case in DECODING_CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 100
    assert not set(ids) & {case.id for case in CASES}


def test_the_public_api_table_is_large_and_its_ids_new():
    ids = [case.id for case in PUBLIC_API_CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 400
    assert not set(ids) & {case.id for case in CASES + DECODING_CASES}


ALL_CASES = CASES + DECODING_CASES + PUBLIC_API_CASES


@pytest.mark.parametrize("case", ALL_CASES, ids=[case.id for case in ALL_CASES])
def test_bad_input(case: Bad):
    if case.error is None:
        assert case.check(case.call()), f"{case.id}: not the documented result"
        return
    with pytest.raises(case.error) as raised:
        case.call()
    message = str(raised.value).lower()
    missing = [word for word in case.words if word.lower() not in message]
    assert not missing, f"{case.id}: message {str(raised.value)!r} lacks {missing}"


def test_memory_errors_are_also_value_and_memory_errors():
    assert issubclass(mha.MemoryBudgetError, MemoryError)
    assert issubclass(mha.MemoryBudgetError, ValueError)


def test_default_budget_allows_chapter_6_on_a_24_gib_machine_and_stops_40000_on_a_laptop():
    """Chapter 6 forms float32 scores at n = 16384 (1 GiB); n = 40000 needs 5.96 GiB."""
    from mha._validation import DEFAULT_FRACTION, check_allocation

    with mha.memory_budget(int(24 * 2**30 * DEFAULT_FRACTION)):  # this machine's default
        check_allocation("scores", (16384, 16384), torch.float32, "use a smaller n")
        with pytest.raises(mha.MemoryBudgetError, match=r"5\.96 GiB"):
            check_allocation("scores", (40000, 40000), torch.float32, "use a smaller n")
    with mha.memory_budget(int(8 * 2**30 * DEFAULT_FRACTION)):  # an 8 GiB laptop
        # exactly 1 GiB: allowed
        check_allocation("scores", (16384, 16384), torch.float32, "use a smaller n")
        with pytest.raises(mha.MemoryBudgetError):
            check_allocation("scores", (16385, 16384), torch.float32, "use a smaller n")


def test_budget_is_overridable_and_restored():
    before = mha.get_memory_budget()
    q = torch.zeros(1, 300, 2)
    with mha.memory_budget(300 * 300 * 4 - 1):
        assert mha.get_memory_budget() == 300 * 300 * 4 - 1
        with pytest.raises(mha.MemoryBudgetError, match="chunked_attention"):
            mha.attention(q, q, q)
        mha.chunked_attention(q, q, q, chunk_size=64)  # never forms the (300, 300) scores
    assert mha.get_memory_budget() == before
    mha.attention(q, q, q)  # the default budget allows it
    previous = mha.set_memory_budget(LAPTOP)
    try:
        assert mha.get_memory_budget() == LAPTOP
    finally:
        mha.set_memory_budget(previous)
    assert mha.get_memory_budget() == before
    with pytest.raises(ValueError, match="nbytes"):
        mha.set_memory_budget(-1)


def test_set_debug_is_process_wide_as_its_docstring_says():
    """Unlike the memory budget, the debug switch is one setting for every thread; its
    docstring said nothing about threads."""
    import threading

    assert "process-wide" in mha.set_debug.__doc__
    before = mha.get_debug()
    thread = threading.Thread(target=mha.set_debug, args=(not before,))
    thread.start()
    thread.join()
    try:
        assert mha.get_debug() is (not before)  # the other thread's setting holds here
    finally:
        mha.set_debug(before)


def test_set_debug_docstring_describes_the_look_the_fused_path_takes():
    """It described a sum check (isfinite(Q.sum() + K.sum() + V.sum())) the code no longer
    does; the look is element by element and covers a float mask's NaN, as shown here."""
    doc = mha.set_debug.__doc__
    assert "Q.sum()" not in doc and "element by element" in doc and "float mask" in doc
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    mask = torch.zeros(3, 3)
    mask[1, 2] = float("nan")
    fused, _ = layer(x, mask=mask, need_weights=False)
    open_, _ = layer(x, mask=mask)
    torch.testing.assert_close(fused, open_, equal_nan=True)  # query 1 is NaN in both
    assert fused[0, 1].isnan().all() and not fused[0, 0].isnan().any()


@pytest.mark.parametrize("setting", ["block", "setter"])
def test_a_memory_budget_is_the_calling_threads_only(setting):
    """``with mha.memory_budget(...)`` or ``set_memory_budget`` in one thread must not make
    another thread's attention fail (torch.set_grad_enabled is per thread in the same way)."""
    import contextlib
    import threading

    q = torch.zeros(1, 300, 2)
    inside, other_done = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        inside.wait()
        seen["budget"] = mha.get_memory_budget()
        try:
            mha.attention(q, q, q)
            seen["error"] = None
        except mha.MemoryBudgetError as error:
            seen["error"] = error
        other_done.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    before = mha.get_memory_budget()
    previous = mha.set_memory_budget(100) if setting == "setter" else None
    try:
        with mha.memory_budget(100) if setting == "block" else contextlib.nullcontext():
            inside.set()
            other_done.wait(timeout=60)
            with pytest.raises(mha.MemoryBudgetError):
                mha.attention(q, q, q)
    finally:
        if setting == "setter":
            mha.set_memory_budget(previous)
    thread.join()
    assert seen == {"budget": before, "error": None}
    with mha.memory_budget(100), mha.memory_budget(None):  # blocks nest; None is the default
        assert mha.get_memory_budget() == before


def _follow_the_hint(error: ValueError, name: str, value: object) -> torch.Tensor:
    """Run the conversion the message suggests, ``torch.as_tensor(name[, dtype=...])``."""
    call = re.search(rf"torch\.as_tensor\({name}(, dtype=torch\.\w+)?\)", str(error))
    assert call, str(error)
    return eval(call.group(0), {"torch": torch, name: value})  # noqa: S307 (our own message)


def test_a_non_tensor_argument_is_told_the_dtype_that_fits_it():
    """The hint was float32 for everything: a numpy bool mask followed it into an additive
    0/1 mask that masks nothing, and token ids into float ids that generate refuses."""
    torch.manual_seed(0)
    layer, x = mha.MultiHeadAttention(8, 2), torch.randn(1, 4, 8)
    for allowed in (np.tril(np.ones((4, 4), bool)), np.tril(np.ones((4, 4), bool)).tolist()):
        with pytest.raises(ValueError, match="mask must be a torch.Tensor") as error:
            layer(x, mask=allowed)
        mask = _follow_the_hint(error.value, "mask", allowed)
        assert mask.dtype == torch.bool
        # causal by hand: query 0 sees key 0 only
        assert layer(x, mask=mask)[1][0, :, 0].tolist() == [[1.0, 0.0, 0.0, 0.0]] * 2
    model = mha.TinyDecoder(256, 16, embed_dim=16, num_heads=2, num_layers=1)
    ids = np.array([[1, 2, 3]])
    with pytest.raises(ValueError, match="prompt must be a torch.Tensor") as error:
        mha.generate(model, ids, 2)
    prompt = _follow_the_hint(error.value, "prompt", ids)
    assert prompt.dtype == torch.int64 and model(prompt).shape == (1, 3, 256)  # float refused
    q = np.ones((3, 4))  # float64 data: float32, as the course's tensors
    with pytest.raises(ValueError, match="query must be a torch.Tensor") as error:
        mha.attention(q, torch.ones(3, 4), torch.ones(3, 4))
    assert _follow_the_hint(error.value, "query", q).dtype == torch.float32
