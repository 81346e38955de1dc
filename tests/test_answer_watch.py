"""The checks watch the answer's calls (mha.answer_watch): the course's reference entered, however
it was reached, is reported with the result (a flag for the instructor, the points unchanged);
a torch op the exercise forbids makes the part wrong. Each answer runs in a notebook (the check
called on it) and across a process boundary as under grading (test_checks_mutated_inputs' child,
which serves requests with the sandbox's own ``mha.exercises.serve``)."""

from __future__ import annotations

import re

import pytest
import torch
from test_checks_mutated_inputs import ChildChannel, all_checks
from test_checks_variants import VARIANTS, check_of

import mha
import mha.checks.ch01 as ch01
import mha.checks.ch02 as ch02
import mha.checks.ch06 as ch06
import mha.checks.ch07 as ch07
import mha.checks.ch08 as ch08
import mha.checks.ch09 as ch09
from mha.answer_watch import ESCAPED, LEFT_TORCH, SWITCHED_OFF, resolve
from mha.exercises import LocalChannel, evaluate, set_grading_seed
from mha_grade import assignments
from mha_grade.compare import Outcome, score

# one-line answers that call the course's own implementation, each by another route
ROUTES = '''
import sys
import types
import numpy as np
import torch
import torch.nn.functional as F
import mha
import mha.checks.ch06

M = mha
name = "apply" + "_rotary"


def by_alias(x, positions):
    return M.apply_rotary(x, positions)


def by_getattr(x, positions):
    return getattr(mha, name)(x, positions)


by_itself = mha.apply_rotary  # the reference handed to the check as the answer


def by_private_helper(x, positions):
    return mha.checks.ch06._rotate_reference(x, positions, 10000.0)


def by_a_copy(x, positions):
    original = mha.apply_rotary
    copy = types.FunctionType(original.__code__, original.__globals__, "mine",
                              original.__defaults__)
    return copy(x, positions)


def pruning_order_alias(confidence):  # 7.5
    return M.pruning_order(confidence)


def mean_pool_alias(hidden, mask):  # 8.1
    return M.pretrained.mean_pool(hidden, mask)


def gqa_alias(q, k, v):  # 9.2
    groups = q.shape[1] // k.shape[1]
    return M.attention(q, M.repeat_kv(k, groups), M.repeat_kv(v, groups), is_causal=True)[0]


def honest_rotary(x, positions):
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    d = x.shape[-1]
    angles = positions[:, None].double() * 10000.0 ** (-torch.arange(0, d, 2).double() / d)
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)


def switched_off(x, positions):  # calls the reference with the watch off, and leaves it off
    sys.setprofile(None)
    return mha.apply_rotary(x, positions)


def switched_off_softmax(scores, temperature):  # attack 40: the hook toggled, no reference
    previous = sys.getprofile()
    sys.setprofile(None)
    out = torch.softmax(scores / temperature, dim=-1)
    sys.setprofile(previous)
    return out


def torch_softmax(scores, temperature):
    return torch.softmax(scores / temperature, dim=-1)


def functional_softmax(scores, temperature):
    return F.softmax(scores / temperature, dim=-1)


def method_softmax(scores, temperature):
    return (scores / temperature).softmax(-1)


def module_softmax(scores, temperature):
    return torch.nn.Softmax(dim=-1)(scores / temperature)


def log_softmax_exp(scores, temperature):
    return (scores / temperature).log_softmax(-1).exp()


def softmax_by_refs(scores, temperature):  # review 41a: torch's Python softmax, from exp
    import torch._refs
    return torch._refs.softmax(scores / temperature, -1)


def softmax_by_decomposition(scores, temperature):  # review 41a: aten's decomposition
    import torch._decomp.decompositions
    return torch._decomp.decompositions._softmax(scores / temperature, -1, False)


def softmax_by_apply(scores, temperature):  # review 41a: math.exp on each element
    import math
    s = scores / temperature
    e = (s - s.amax(-1, keepdim=True)).apply_(math.exp)
    return e / e.sum(-1, keepdim=True)


def in_a_thread(scores, temperature):  # the watch sees one thread (outside attack)
    import threading
    box = []
    worker = threading.Thread(target=lambda: box.append(torch.softmax(scores / temperature, -1)))
    worker.start()
    worker.join()
    return box[0]


def in_a_forked_process(scores, temperature):  # a softmax in a child, sent back by a pipe
    import os
    import pickle
    s = (scores / temperature).numpy()  # numpy in the child: torch may hang after a fork
    read, write = os.pipe()
    if os.fork() == 0:
        e = np.exp(s - s.max(-1, keepdims=True))
        os.write(write, pickle.dumps(e / e.sum(-1, keepdims=True)))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        return torch.from_numpy(pickle.loads(pipe.read()))


def reference_in_a_thread(x, positions):
    import threading
    box = []
    worker = threading.Thread(target=lambda: box.append(M.apply_rotary(x, positions)))
    worker.start()
    worker.join()
    return box[0]


def with_torch_dispatch_disabled(scores, temperature):  # the mode never sees the op (#35)
    with torch._C._DisableTorchDispatch():
        return torch.softmax(scores / temperature, -1)


def with_the_python_key_excluded(scores, temperature):
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        return torch.softmax(scores / temperature, -1)


def with_the_mode_popped(scores, temperature):
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    mode = _pop_mode()
    try:
        return torch.softmax(scores / temperature, -1)
    finally:
        _push_mode(mode)


class Hidden(torch.Tensor):  # its own dispatch: its Python runs while torch suspends the mode
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        (x,) = [a for a in args if isinstance(a, Hidden)]
        with torch._C._DisableTorchDispatch():
            plain = x.as_subclass(torch.Tensor)
        return torch.softmax(plain, -1)


def by_a_subclass(scores, temperature):
    return torch.exp((scores / temperature).as_subclass(Hidden))


def all_called_from_c(scores, temperature):  # no Python event while the key is excluded
    guard = torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python))
    kind = type(guard)
    return list(map(lambda *steps: steps[1], map(kind.__enter__, [guard]),
                    map(torch.softmax, [scores / temperature], [-1]),
                    map(kind.__exit__, [guard], [None], [None], [None])))[0]


def in_a_thread_by_an_alias(scores, temperature):  # _thread.start_new, not start_new_thread
    import _thread
    import queue
    box = queue.Queue()
    _thread.start_new(lambda: box.put(torch.softmax(scores / temperature, -1)), ())
    return box.get()


def _moved(module):
    """Every function of ``module`` re-created with its code's line numbers moved, calling each
    other: the reference's code runs, none of its code objects (an outside attack)."""
    copies = dict(vars(module))

    def moved(code):
        consts = tuple(moved(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_firstlineno=code.co_firstlineno + 10000, co_consts=consts)

    for key, value in list(copies.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            copy = types.FunctionType(moved(value.__code__), copies, value.__name__,
                                      value.__defaults__, value.__closure__)
            copy.__kwdefaults__ = value.__kwdefaults__
            copies[key] = copy
    return types.SimpleNamespace(**copies)


_rotary = _moved(sys.modules["mha.layers.rotary"])


def by_a_moved_copy(x, positions):
    return _rotary.apply_rotary(x, positions)


def through_sdpa(scores, temperature):  # softmax(s I^T) I, with scale 1
    s = scores / temperature
    eye = torch.eye(s.shape[-1], dtype=s.dtype)
    return F.scaled_dot_product_attention(s, eye, eye, scale=1.0)


def prefers_by_softmax(x):  # 2.2, "without a softmax"
    w = torch.softmax(x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5, dim=-1)
    return w > w.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def prefers_by_mha(x):
    _, w = mha.self_attention(x)
    return w > w.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def prefers_by_exp(x):  # a softmax written out: exponentials of the scores, normalised
    e = torch.exp(x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5)
    w = e / e.sum(dim=-1, keepdim=True)
    return w > w.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def prefers_by_dots(x):
    dots = x @ x.transpose(-2, -1)
    return dots > dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def _prefers(w):
    return w > w.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)


def _scores(x):
    s = x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5
    return s - s.amax(-1, keepdim=True)


def prefers_by_pow(x):  # review 40: e^s as a power of e, then normalised
    w = torch.pow(torch.e, _scores(x))
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_rpow(x):  # the same as an operator: math.e ** s
    w = torch.e ** _scores(x)
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_float_power(x):
    w = torch.float_power(2.0, _scores(x) / np.log(2.0))
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_sigmoid(x):  # s / (1 - s) of sigma(s) is e^s
    p = torch.sigmoid(_scores(x))
    w = p / (1 - p)
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_tanh(x):  # (1 + tanh(s/2)) / (1 - tanh(s/2)) is e^s
    t = torch.tanh(_scores(x) / 2)
    w = (1 + t) / (1 - t)
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_numpy_exp(x):  # review 40: numpy.exp on the tensor (Tensor.__array__)
    w = np.exp(_scores(x))
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_erfcx(x):  # review 41a: erfcx(-sqrt t) / erfc(-sqrt t) is e^t for t >= 0
    s = _scores(x)
    t = s - s.amin(-1, keepdim=True)
    w = torch.special.erfcx(-t.sqrt()) / torch.special.erfc(-t.sqrt())
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_apply(x):  # review 41a: math.exp on each element, in Python
    import math
    w = _scores(x).apply_(math.exp)
    return _prefers(w / w.sum(-1, keepdim=True))


def prefers_by_softplus(x):  # log(1 + e^s) grows with s: the comparison, through softplus
    return _prefers(F.softplus(_scores(x)))


def prefers_by_numpy(x):  # the scores' exponentials in NumPy, the answer back in torch
    s = _scores(x).numpy()
    w = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    return torch.from_numpy(w > np.diagonal(w, axis1=-2, axis2=-1)[..., None])


def scipy_softmax(scores, temperature):  # review 40: 1.2 through scipy's softmax
    import scipy.special
    s = (scores / temperature).double().numpy()
    return torch.from_numpy(scipy.special.softmax(s, axis=-1)).to(scores.dtype)


def scipy_softmax_of_the_tensor(scores, temperature):  # scipy reads the tensor itself
    import scipy.special
    return torch.as_tensor(scipy.special.softmax(scores / temperature, axis=-1))


def numpy_by_dlpack(scores, temperature):
    s = np.from_dlpack((scores / temperature).double())
    e = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy(e / e.sum(-1, keepdims=True)).to(scores.dtype)
'''


def namespace() -> dict:
    found: dict = {}
    exec(ROUTES, found)  # noqa: S102 (the test's own answers)
    return found


def graded_here(check, answer, grading_seed: int = 7):
    set_grading_seed(grading_seed)
    try:
        return evaluate(check.checker, check.exercise, check.max_points,
                        LocalChannel(answer).answer())
    finally:
        set_grading_seed(None)


@pytest.fixture(scope="module")
def child():
    channel = ChildChannel(ROUTES)
    yield channel
    channel.close()


# a worker started before the check (as a cell before the check cell would), fed by a queue
PRESTARTED = ROUTES + '''
import queue
import threading

jobs, done = queue.Queue(), queue.Queue()


def worker():
    while True:
        scores, temperature = jobs.get()
        done.put(torch.softmax(scores / temperature, -1))


threading.Thread(target=worker, daemon=True).start()


def by_a_prestarted_worker(scores, temperature):
    jobs.put((scores, temperature))
    return done.get()
'''


REFERENCE_ROUTES = [(ch06.rope_complex, "by_alias", "mha.apply_rotary"),
                    (ch06.rope_complex, "by_getattr", "mha.apply_rotary"),
                    (ch06.rope_complex, "by_itself", "mha.apply_rotary"),
                    (ch06.rope_complex, "by_private_helper",
                     "mha.checks.ch06._rotate_reference"),
                    (ch06.rope_complex, "by_a_copy", "mha.apply_rotary"),
                    (ch06.rope_complex, "by_a_moved_copy", "mha.apply_rotary"),
                    (ch07.confidence_order, "pruning_order_alias", "mha.pruning_order"),
                    (ch08.mean_pool, "mean_pool_alias", "mha.pretrained.mean_pool"),
                    (ch09.gqa_attention, "gqa_alias", "mha.repeat_kv")]


@pytest.mark.parametrize("check,name,reference", REFERENCE_ROUTES,
                         ids=[name for _, name, _ in REFERENCE_ROUTES])
def test_a_reference_is_seen_however_the_answer_reaches_it(child, check, name, reference):
    for result in (graded_here(check, namespace()[name]), child.grade(check, name)):
        assert reference in result.entered, result
        assert result.points == check.max_points  # a flag, not a penalty: the points stay


def test_an_honest_answer_enters_no_reference(child):
    for result in (graded_here(ch06.rope_complex, namespace()["honest_rotary"]),
                   child.grade(ch06.rope_complex, "honest_rotary")):
        assert result.status == "correct" and result.entered == (), result


def test_switching_the_watch_off_is_reported(child):
    result = child.grade(ch06.rope_complex, "switched_off")
    assert SWITCHED_OFF in result.entered, result


def test_a_seen_reference_becomes_a_flag_of_the_exercise():
    assignment = assignments.load_assignment(next(
        p for p in (mha.__path__[0] + "/../../notebooks",) for p in
        __import__("pathlib").Path(p).glob("06_*.ipynb")))
    index = next(i for i, info in assignment.info.items() if info.exercise == "6.2")
    outcome = Outcome("alice.ipynb", assignment)
    score(outcome, {str(index): graded_here(ch06.rope_complex, namespace()["by_alias"])}, "",
          lambda text: text)
    assert outcome.points["6.2"] == 1
    assert any(f.startswith("calls the reference of exercise 6.2") and "mha.apply_rotary" in f
               for f in outcome.flags), outcome.flags


SOFTMAXES = ["torch_softmax", "functional_softmax", "method_softmax", "module_softmax",
             "log_softmax_exp", "through_sdpa",
             "softmax_by_refs", "softmax_by_decomposition"]  # review 41a: full marks before
# the tensors leave torch for NumPy, where the mode sees no op (review 40: full marks before),
# or for Python's math on each element (review 41a)
NUMPY_SOFTMAXES = ["scipy_softmax", "scipy_softmax_of_the_tensor", "numpy_by_dlpack",
                   "softmax_by_apply"]


@pytest.mark.parametrize("name", ["in_a_thread", "in_a_forked_process",
                                  "in_a_thread_by_an_alias"])
def test_work_in_another_thread_or_process_is_reported_and_forbidden_ops_count_it_wrong(
        child, name, capsys):
    """An outside attack ran the forbidden softmax (and the reference) in a thread, which the
    per-thread hooks do not see: full marks, no flag."""
    for result in (graded_here(ch01.stable_softmax, namespace()[name]),
                   child.grade(ch01.stable_softmax, name)):
        assert result.points == 0 and result.status == "wrong", result
        assert "another thread or process" in result.message
        assert ESCAPED in result.entered
    result = child.grade(ch06.rope_complex, "reference_in_a_thread")
    assert ESCAPED in result.entered, result  # a flag for the instructor; the points stay


def test_a_worker_started_before_the_call_is_reported_and_forbidden_ops_count_it_wrong():
    """An outside attack: a worker thread started by an earlier cell did the softmax while the
    answer waited on a queue; no thread was started during the call."""
    channel = ChildChannel(PRESTARTED)
    try:
        result = channel.grade(ch01.stable_softmax, "by_a_prestarted_worker")
        assert result.points == 0 and result.status == "wrong", result
        assert ESCAPED in result.entered, result
        # the worker is there during every call: an honest answer is reported too (a flag)
        result = channel.grade(ch06.rope_complex, "honest_rotary")
        assert result.points == result.max_points and ESCAPED in result.entered, result
    finally:
        channel.close()


@pytest.mark.parametrize("name", ["with_torch_dispatch_disabled", "with_the_python_key_excluded",
                                  "with_the_mode_popped", "by_a_subclass"])
def test_switching_the_ops_watch_off_is_reported_and_counts_wrong(child, name, capsys):
    """Outside attacks: torch.softmax with torch's Python dispatch key excluded, or the mode
    popped, never reached the mode: full marks, no flag."""
    for result in (ch01.stable_softmax(namespace()[name]),
                   graded_here(ch01.stable_softmax, namespace()[name]),
                   child.grade(ch01.stable_softmax, name)):
        assert result.points == 0 and result.status == "wrong", result
        assert SWITCHED_OFF in result.entered, result


def test_threads_alive_beside_the_answer_are_watched_under_grading_only(monkeypatch):
    """The grader's runner takes the threads alive before the student's first cell (its shell's,
    IPython's history) as the course's, and reports any other; in a student's own notebook, where
    the kernel, a progress bar or torch start threads of their own, none is reported (the full
    run found honest answers of chapters 1 and 2 marked wrong in their notebooks)."""
    import threading

    import mha.answer_watch as watch

    watch._forget_threads()  # as in a notebook
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    try:
        watch.allow_threads_alive_now()  # the grader's runner, before any student code
        worker.start()
        assert ESCAPED in watch.observe(lambda: None, (), ())[1]
        watch.allow_threads_alive_now()
        assert ESCAPED not in watch.observe(lambda: None, (), ())[1]
        watch._forget_threads()  # a student's own notebook
        other = threading.Thread(target=stop.wait, daemon=True)
        other.start()
        assert ESCAPED not in watch.observe(lambda: None, (), ())[1]
    finally:
        stop.set()
        watch._forget_threads()


def test_an_op_hidden_from_the_mode_by_builtins_is_recorded_by_the_profiler(capsys):
    """An answer that switches the dispatch mode off and on from builtins called by builtins
    (map) makes no event of the profile hook while it is off, so the mode does not see its
    torch.softmax; torch's profiler, below the modes, records it: wrong (it was full marks
    before attack 48's fix). Its code is not plain either (torch._C, __enter__)."""
    from mha_grade.plain_code import why_not_plain

    result = graded_here(ch01.stable_softmax, namespace()["all_called_from_c"])
    assert result.points == 0 and "forbids what your answer ran: torch.softmax" in \
        result.message, result
    answer = re.search(r"\ndef all_called_from_c.*?\n\n\n", ROUTES, re.S).group(0)
    assert why_not_plain([answer])


def test_a_reference_is_known_by_its_code_not_its_line_numbers():
    from mha.answer_watch import content

    def moved(code):
        return code.replace(co_firstlineno=code.co_firstlineno + 10000, co_name="mine")

    code = mha.apply_rotary.__code__
    assert moved(code) != code  # so a look-up by the code object misses the copy
    assert content(moved(code)) == content(code)
    other = mha.attention.__code__
    assert content(other) != content(code)
    # a changed constant is another function (the "rebuild" limit the docstring names)
    changed = code.replace(co_consts=tuple(c + 1 if type(c) is int else c
                                           for c in code.co_consts))
    assert changed.co_consts != code.co_consts and content(changed) != content(code)


@pytest.mark.chapter(1)
@pytest.mark.parametrize("name", SOFTMAXES)
def test_1_2_refuses_every_softmax_of_torch(child, name, capsys):
    for result in (ch01.stable_softmax(namespace()[name]),
                   graded_here(ch01.stable_softmax, namespace()[name]),
                   child.grade(ch01.stable_softmax, name)):
        assert result.points == 0 and result.status == "wrong", result
        # named as the student wrote it (torch.softmax), not by torch's op (aten._softmax);
        # an op no public function is named after as torch's op (sdpa's _safe_softmax: 41a)
        assert re.search(r"the exercise forbids what your answer ran: torch(\.|'s \w+ "
                         r"operation)", result.message), result
        assert "torch._" not in result.message and "(_" not in result.message


@pytest.mark.chapter(1)
@pytest.mark.parametrize("name", NUMPY_SOFTMAXES)
def test_1_2_refuses_an_answer_whose_tensors_leave_torch_for_numpy(child, name, capsys):
    for result in (ch01.stable_softmax(namespace()[name]),
                   graded_here(ch01.stable_softmax, namespace()[name]),
                   child.grade(ch01.stable_softmax, name)):
        assert result.points == 0 and result.status == "wrong", result
        assert "out of torch into NumPy" in result.message, result
        assert LEFT_TORCH in result.entered, result  # and a flag for the instructor


# review 40: the exponential as a power (pow.Scalar), or in NumPy, got full marks
PREFERS_BY_WEIGHTS = ["prefers_by_softmax", "prefers_by_mha", "prefers_by_exp",
                      "prefers_by_pow", "prefers_by_rpow", "prefers_by_float_power",
                      "prefers_by_sigmoid", "prefers_by_tanh", "prefers_by_numpy_exp",
                      "prefers_by_numpy",
                      "prefers_by_erfcx", "prefers_by_apply", "prefers_by_softplus"]  # 41a


@pytest.mark.chapter(2)
@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")  # numpy.exp(tensor)
@pytest.mark.parametrize("name", PREFERS_BY_WEIGHTS)
def test_2_2_refuses_an_answer_that_computes_the_weights(child, name, capsys):
    for result in (ch02.prefers_other(namespace()[name]),
                   graded_here(ch02.prefers_other, namespace()[name]),
                   child.grade(ch02.prefers_other, name)):
        assert result.points == 0 and result.status == "wrong", result
        assert "the exercise forbids" in result.message, result


@pytest.mark.chapter(2)
@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")
def test_2_2_each_weighing_answer_is_right_but_for_the_rule():
    """The answers above compute the right comparison: only the rule makes them wrong."""
    x = torch.randn(3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(40))
    routes = namespace()
    for name in PREFERS_BY_WEIGHTS:
        assert torch.equal(routes[name](x), routes["prefers_by_dots"](x)), name


@pytest.mark.chapter(2)
def test_a_forbidden_op_is_named_by_a_function_that_exists(child, capsys):
    """Review 41a (F6): the message named torch.softplus, torch.elu and torch.safe_softmax,
    which do not exist."""
    from mha.exercises import _written_name

    for result in (ch02.prefers_other(namespace()["prefers_by_softplus"]),
                   child.grade(ch02.prefers_other, "prefers_by_softplus")):
        assert "ran: torch.nn.functional.softplus (or" in result.message, result
    assert [_written_name(op) for op in ("softmax", "elu", "safe_softmax", "special_erfcx")] == [
        "torch.softmax", "torch.nn.functional.elu", "torch's safe_softmax operation",
        "torch.special.erfcx"]
    # review 47: a student who used nn.LSTM read "torch's mkldnn_rnn_layer operation"
    assert {_written_name(op) for op in ("mkldnn_rnn_layer", "lstm", "gru_cell", "rnn_tanh")} \
        == {"a recurrent layer (torch.nn.LSTM, GRU or RNN)"}
    for op in ("softplus", "elu", "softmax", "sigmoid", "exp2", "ldexp", "celu"):  # exists
        name = _written_name(op).removeprefix("torch.")
        owner = torch.nn.functional if name.startswith("nn.functional.") else torch
        assert hasattr(owner, name.removeprefix("nn.functional.")), name


# attack 48: a forbidden op run where the dispatch mode is suspended, by a callback made of
# builtins (no Python frame) that a kernel runs as it frees a storage
WEAK_CALLBACK = """
import functools
import weakref


def by_a_weak_callback(scores, temperature):
    out = torch.empty_like(scores)
    work = functools.partial(dict.fromkeys, map(functools.partial(
        torch.softmax, dim=-1, out=out), [scores / temperature]))
    holder = torch.zeros(1)
    storage = holder.untyped_storage()
    keep = weakref.ref(storage, work)
    del storage
    holder.set_(torch.zeros(1))
    return out


def printing_honestly(scores, temperature):
    s = scores / temperature
    e = torch.exp(s - s.max(-1, keepdim=True).values)
    print(e[:1], f"{e[0, 0]}", repr(e.sum()))
    return e / e.sum(-1, keepdim=True)
"""


@pytest.mark.chapter(1)
def test_an_op_run_where_the_mode_is_suspended_is_recorded_and_counts_wrong(capsys):
    """Attack 48 (F2): a weak reference's callback made of builtins, run by the kernel that
    frees a storage, where torch suspends the dispatch mode and no Python frame tells the
    profile hook: 1.2 full marks with torch.softmax. torch's profiler records every op the call
    dispatches: wrong, and named."""
    found: dict = {"torch": torch}
    exec(WEAK_CALLBACK, found)  # noqa: S102 (the test's own answers)
    result = graded_here(ch01.stable_softmax, found["by_a_weak_callback"])
    assert result.points == 0 and "forbids what your answer ran: torch.softmax" in \
        result.message, result


@pytest.mark.chapter(1)
def test_an_honest_answer_that_prints_its_tensors_is_right(capsys):
    """Attack 48 (F1): printing a tensor inside the answer (print, an f-string, repr) ran
    contextlib's and a named tuple's code while torch's printer had switched the modes off:
    'your answer switched off the watch', 0 points and a flag for an honest answer."""
    found: dict = {"torch": torch}
    exec(WEAK_CALLBACK, found)  # noqa: S102
    result = graded_here(ch01.stable_softmax, found["printing_honestly"])
    assert result.status == "correct" and result.entered == (), result
    assert "tensor(" in capsys.readouterr().out  # it did print


def seeding_honestly(scores, temperature):  # attack 49: torch keeps its call's stack
    torch.manual_seed(0)
    torch.seed()
    with torch.autograd.detect_anomaly():
        s = scores / temperature
        e = torch.exp(s - s.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


@pytest.mark.chapter(1)
@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled:UserWarning")
def test_an_honest_answer_that_seeds_is_right(capsys):
    """Attack 49: torch.manual_seed (without CUDA) keeps the stack of its call through
    traceback.format_stack, whose walk_stack is one of the standard library's doors to frames:
    an honest answer that seeded got 0 and every exercise a flag, as reaching past the watch.
    A door torch's own code opens hands the answer no frame; one the answer opens still
    counts (the tests of TAMPERED)."""
    result = graded_here(ch01.stable_softmax, seeding_honestly)
    assert result.status == "correct" and result.entered == (), result


LIBRARIES_ASK_FOR_FRAMES = """
import json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
import mha
from mha.answer_watch import observe

def plots(scores):  # matplotlib logs a warning: logging finds its caller's frame
    plt.imshow([[[0.5, 1.5, 0.2]]])
    plt.close("all")
    return scores.exp()

def old_path(scores):  # an old module path's first use warns at the caller's line
    return scores * mha.alibi.alibi_slopes(4)[0]

print(json.dumps([sorted(observe(lambda: f(torch.ones(2)), ("mha.repeat_kv",), ("softmax",))[1])
                  for f in (plots, old_path)]))
"""


def test_a_library_that_asks_for_frames_for_itself_is_not_the_answer_reaching_past_the_watch():
    """Attack 50: matplotlib's own warning (logging.currentframe) inside an honest answer that
    plots, and mha's warning about an old module path (sys._getframe), read as the answer
    reaching past the watch: 0 points and a flag. A library's own code that opens a door to
    frames hands the answer none; the answer opening one still counts (the tests above)."""
    import json
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", LIBRARIES_ASK_FOR_FRAMES], capture_output=True,
                         text=True, check=True)
    assert json.loads(run.stdout.splitlines()[-1]) == [[], []], run.stdout + run.stderr


def _prompt(notebook: str, label: str) -> str:
    import json
    import pathlib

    cells = json.loads((pathlib.Path(__file__).parent.parent / "notebooks" / notebook)
                       .read_text())["cells"]
    return next("".join(c["source"]) for c in cells if f":label: {label}" in "".join(c["source"]))


@pytest.mark.parametrize("notebook,label", [("01_attention_recap.ipynb", "ex-01-2"),
                                            ("02_diagonal_problem.ipynb", "ex-02-2")])
def test_the_prompt_says_what_the_check_refuses_and_what_it_cannot_see(notebook, label):
    """Review 41a (F2): the prompts said the check refuses tensors handed to NumPy, yet NumPy
    reached by map(Tensor.numpy, ...) or over .tolist() passed: a prompt promises only what
    the check enforces (refused: the tests above) and says what it cannot see."""
    text = " ".join(_prompt(notebook, label).split())
    assert "however they are called" in text
    assert "`numpy.exp(scores)`" in text and "apply_(math.exp)" in text  # refused, tested above
    assert "It cannot see every way around" in text and "reaches NumPy by another route" in text
    assert "passes the check but not the exercise" in text
    assert "Stay in torch" not in text  # the old promise


def test_a_forbidden_word_matches_whole_words_of_op_names():
    from mha.answer_watch import op_matches

    assert op_matches("_softmax", ("softmax",)) and op_matches("_log_softmax", ("softmax",))
    assert op_matches("exp_", ("exp",)) and op_matches("exp", ("exp",))
    assert not op_matches("expand", ("exp",)) and not op_matches("expm1", ("exp",))
    assert op_matches("_scaled_dot_product_flash_attention_for_cpu", ("scaled_dot_product",))
    # a word with a dot names one overload: a power of a tensor exponent, not a square
    assert op_matches("pow.Scalar", ("pow.Scalar",))
    assert not op_matches("pow.Tensor_Scalar", ("pow.Scalar",))
    assert not op_matches("pow", ("pow.Scalar",)) and not op_matches("pow.Scalar", ("pow",))


@pytest.mark.chapter(2)
def test_2_2_the_lemmas_answer_keeps_full_marks(child):
    result = child.grade(ch02.prefers_other, "prefers_by_dots")
    assert result.status == "correct" and result.points == 1, result


@pytest.mark.parametrize("module,name", list(VARIANTS), ids=[n for _, n in VARIANTS])
def test_the_correct_variants_enter_no_reference(module, name):
    check = check_of(module, name)
    for variant in VARIANTS[(module, name)]:
        if name == "failure_rate_by_tokens":  # slow (2000 token sets per size): see below
            continue
        result = graded_here(check, variant)
        assert result.status == "correct" and result.entered == (), (variant.__name__, result)


def test_2_3_may_use_the_chapters_helper_built_on_mha():
    # the prompt allows section 2.4's failure_rates, which calls mha.self_attention
    from test_checks_variants import v23_mha

    result = graded_here(check_of("ch02", "failure_rate_by_tokens"), v23_mha)
    assert result.status == "correct" and result.entered == (), result


def test_every_check_declares_its_reference_names():
    for check in all_checks():
        assert check.reference_names, check.exercise
        for name in check.reference_names:
            target = resolve(name)
            assert callable(target) or name.startswith("mha.checks."), (check.exercise, name)


def test_the_watch_costs_little_per_call():
    import time

    answer = namespace()["honest_rotary"]
    graded_here(ch06.rope_complex, answer)  # the references' code objects, found once
    start = time.perf_counter()
    for _ in range(5):
        graded_here(ch06.rope_complex, answer)
    watched = time.perf_counter() - start
    assert watched / 5 < 0.5, watched
    torch.manual_seed(0)


def _toggled_profile(work):
    """``work`` run with the profile hook switched off and back on (an outside attack)."""
    import sys

    hook = sys.getprofile()
    setter = sys.setprofile
    setter(None)
    try:
        return work()
    finally:
        setter(hook)


def _toggled_trace(work):
    import sys

    sys.settrace(sys.gettrace())
    return work()


def _toggled_threading_profile(work):
    import threading

    threading.setprofile(None)
    return work()


def _popped_mode(work):
    """``work`` run with the ops' dispatch mode popped and pushed back, the profile hook
    switched off meanwhile (an outside attack)."""
    def inner():
        mode = torch._C._pop_torch_dispatch_stack(None)
        try:
            return work()
        finally:
            torch._C._push_on_torch_dispatch_stack(mode)
    return _toggled_profile(inner)


def _popped_mode_alone(work):
    mode = torch._C._pop_torch_dispatch_stack(None)
    try:
        return torch.zeros(1).add(1), work()  # an op the profile hook sees while popped
    finally:
        torch._C._push_on_torch_dispatch_stack(mode)


SWITCHES = [_toggled_profile, _toggled_trace, _toggled_threading_profile, _popped_mode,
            _popped_mode_alone]


@pytest.mark.parametrize("switch", SWITCHES, ids=[s.__name__ for s in SWITCHES])
def test_a_watch_switched_off_and_back_on_during_the_call_is_reported(switch):
    """Attack 35: ``sys.setprofile(None)`` around the reference (or the dispatch mode popped and
    pushed around torch.softmax), switched back on before the call returned, went unseen."""
    from mha.answer_watch import observe

    scores = torch.randn(3, 4)
    _, found = observe(lambda: switch(lambda: mha.apply_rotary(torch.randn(1, 4, 8),
                                                               torch.arange(4))),
                       ("mha.apply_rotary",), ())
    assert SWITCHED_OFF in found, found
    _, found = observe(lambda: switch(lambda: torch.softmax(scores, dim=-1)), (), ("softmax",))
    assert SWITCHED_OFF in found, found
    _, found = observe(lambda: torch.softmax(scores, dim=-1), ("mha.apply_rotary",), ("exp",))
    assert not found, found  # an honest call: nothing


# attack 40: ways past the watch at run time, each during the watched call
TAMPERING = '''
import builtins, code, gc, inspect, runpy, sys, timeit

def _frame(work):
    sys._getframe().f_back  # the way up to the grader's runner
    return work()

def _current_frame(work):
    inspect.currentframe()
    return work()

def _objects(work):
    gc.get_objects()  # the way to any object: the runner, the watch
    return work()

def _exec(work):
    out = {}
    exec("out['v'] = work()", {"work": work, "out": out})
    return out["v"]

def _eval(work):
    return eval("work()", {"work": work})

def _timeit(work):
    out = []
    timeit.timeit("out.append(work())", globals={"work": work, "out": out}, number=1)
    return out[0]

def _interpreter(work):
    out = []
    code.InteractiveInterpreter({"work": work, "out": out}).runsource("out.append(work())")
    return out[0]
'''


def _tampering() -> dict:
    found: dict = {}
    exec(TAMPERING, found)  # noqa: S102 (the test's own attacks)
    return {name: f for name, f in found.items() if name.startswith("_") and callable(f)
            and not name.startswith("__")}


@pytest.mark.parametrize("name", sorted(_tampering()))
def test_frames_objects_and_code_from_strings_during_the_call_are_reported(name):
    """Attack 40: frames walked up to the runner (F3), code run from a string by timeit (F1b);
    beside them gc, exec, eval and code.InteractiveInterpreter: reported as tampering, the
    reference inside still seen, and a check that forbids ops counts it wrong."""
    from mha.answer_watch import TAMPERED, observe

    route = _tampering()[name]
    _, found = observe(lambda: route(lambda: mha.apply_rotary(torch.randn(1, 4, 8),
                                                              torch.arange(4))),
                       ("mha.apply_rotary",), ())
    assert TAMPERED in found and "mha.apply_rotary" in found, found
    result = graded_here(ch01.stable_softmax,
                         lambda s, t: route(lambda: torch.exp(s / t) / torch.exp(s / t).sum(
                             -1, keepdim=True)))
    assert result.points == 0 and TAMPERED in result.entered, result


FIRST_CALL = '''
import sys
import torch
import mha
from mha.answer_watch import observe

sys.path.insert(0, sys.argv[1])  # the student's own module, written beside the notebook
q = torch.randn(2, 8, 5, 4, dtype=torch.float64)
print(sorted(observe(lambda: mha.attention(q, q, q), ("mha.repeat_kv",), ())[1]))
print(sorted(observe(lambda: __import__("own_module"), (), ())[1]))
'''


def test_an_installed_modules_first_import_is_no_tampering(tmp_path):
    """Review 45, F3: in a fresh process, ``mha.attention``'s first call imports sympy (through
    ``torch.broadcast_shapes``), whose import-time code calls ``inspect.currentframe``: an
    honest answer was recorded as reaching past the watch. A module the student wrote that does
    the same as it is imported during the call is still reported."""
    import subprocess
    import sys

    (tmp_path / "own_module.py").write_text("import inspect\ninspect.currentframe()\n")
    out = subprocess.run([sys.executable, "-c", FIRST_CALL, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "[]", out
    assert "reached past the watch" in out[1], out


def _softmax_in_a_finalizer(scores):
    """Attack 47: torch.softmax in a generator's finally, run when the collector frees the
    generator from a cycle, which an allocation of the answer's own triggers: inside the watch's
    hook or its dispatch, where the mode is suspended."""
    box = []

    def later(s):
        try:
            yield 1
        finally:
            box.append(torch.softmax(s, -1))

    keep = []
    for _ in range(2000):
        g = later(scores)
        next(g)
        cycle = [g]
        cycle.append(cycle)
        g = cycle = None
        while not box and len(keep) < 20_000:
            keep.append(scores + 0)
        if box:
            return box[0]
    return scores


def test_an_op_in_a_finalizer_is_seen_or_the_watch_counts_as_switched_off():
    import gc

    from mha.answer_watch import observe

    scores = torch.randn(4, 6)
    assert gc.isenabled()
    out, found = observe(lambda: _softmax_in_a_finalizer(scores), (), ("softmax",))
    assert found & {"torch op _softmax", SWITCHED_OFF} or not torch.allclose(
        out, torch.softmax(scores, -1)), found  # unseen, it handed back the softmax
    assert gc.isenabled()  # the collector is on again after the call


def test_a_compiled_reference_is_reported():
    """Attack 40 (F2): ``torch.compile(reference)`` ran the reference's bytecode symbolically,
    so no call of it reached the profile hook; the compiled call is reported as tampering."""
    from mha.answer_watch import TAMPERED

    fast = torch.compile
    rotate = fast(mha.apply_rotary, backend="eager", dynamic=True)
    result = graded_here(ch06.rope_complex, lambda x, positions: rotate(x, positions))
    assert TAMPERED in result.entered, result


def _twice(x):
    return x * 2


class _Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2


@pytest.mark.parametrize("route", ["torch.vmap", "torch.func.vmap", "torch.func.grad"])
def test_vmap_is_no_compiler(route):
    """Review 41a (F1): every vmap call enters torch/_export/utils.py (functorch asks whether an
    export is under way), which the watch counted among torch's compilers: an honest vmap answer
    got 0 as tampering (its variants in tests/test_checks_variants.py)."""
    from mha.answer_watch import observe

    transform = {"torch.vmap": torch.vmap, "torch.func.vmap": torch.func.vmap,
                 "torch.func.grad": lambda f: torch.func.grad(lambda t: f(t).sum())}[route]
    x = torch.randn(3, 4)
    _, found = observe(lambda: transform(_twice)(x), (), ("softmax",))
    assert found == set(), found


@pytest.mark.parametrize("route", ["export", "jit.script", "jit.trace"])
def test_export_and_jit_stay_reported(route):
    """The narrowing of F1 leaves torch.export.export and torch.jit reported as tampering."""
    from mha.answer_watch import TAMPERED, observe

    x = torch.randn(3, 4)
    call = {"export": lambda: torch.export.export(_Twice(), (x,)),
            "jit.script": lambda: torch.jit.script(_twice),
            "jit.trace": lambda: torch.jit.trace(_twice, (x,))}[route]
    _, found = observe(call, (), ("softmax",))
    assert TAMPERED in found, found


def test_the_watch_is_bound_before_any_student_code(monkeypatch):
    """Attack 40 (F1): the answer replaced ``mha.answer_watch.observe`` (reached by pkgutil);
    serve looked it up at every call. Now serve, observe and what observe uses are bound at
    import: rebinding them, or ``sys.setprofile``, changes nothing."""
    import sys

    import mha.answer_watch as watch

    monkeypatch.setattr(watch, "observe", lambda call, refs, ops: (call(), set()))
    monkeypatch.setattr(watch, "content", lambda code: None)
    monkeypatch.setattr(watch, "watched_codes", lambda names: {})
    monkeypatch.setattr(sys, "setprofile", lambda hook: None)
    result = graded_here(ch06.rope_complex, namespace()["by_alias"])
    assert "mha.apply_rotary" in result.entered, result


class _Stripping(LocalChannel):
    """A channel whose answer's side drops (part of) the watch from each request, as an answer
    that replaced the runner's serve did (attack 40, F3)."""

    def __init__(self, answer, strip):
        super().__init__(answer)
        self.strip = strip

    def request(self, message: dict) -> dict:
        return super().request(self.strip(message))


@pytest.mark.parametrize("strip", [
    lambda m: {k: v for k, v in m.items() if k != "watch"},
    lambda m: m | {"watch": {"references": m["watch"]["references"], "ops": []}}
    if "watch" in m else m], ids=["no watch", "no ops"])
def test_a_reply_that_did_not_watch_what_was_asked_counts_as_switched_off(strip):
    channel = _Stripping(namespace()["torch_softmax"], strip)
    set_grading_seed(7)
    try:
        result = evaluate(ch01.stable_softmax.checker, "1.2", 1, channel.answer())
    finally:
        set_grading_seed(None)
    assert result.points == 0 and SWITCHED_OFF in result.entered, result


def test_a_watch_switched_off_is_flagged_as_what_the_answer_did():
    """Attack 40 (F5): a notebook that only toggled sys.setprofile was flagged "calls the
    reference of exercise 1.2 (... switched off)": it called none."""
    assignment = assignments.load_assignment(next(
        __import__("pathlib").Path(mha.__path__[0], "..", "..", "notebooks").glob(
            "01_*.ipynb")))
    index = next(i for i, info in assignment.info.items() if info.exercise == "1.2")
    outcome = Outcome("hal.ipynb", assignment)
    score(outcome, {str(index): graded_here(ch01.stable_softmax,
                                            namespace()["switched_off_softmax"])},
          "", lambda text: text)
    assert not any(f.startswith("calls the reference") for f in outcome.flags), outcome.flags
    assert any(f.startswith("defeats the answer watch in exercise 1.2") and SWITCHED_OFF in f
               for f in outcome.flags), outcome.flags


# attack 41 (F1): the watch's own record reached during the call, through the profile hook's
# closure or the dispatch mode's ``found`` (each getter named in the code or built with chr)
PEEKING = '''
import sys, threading, torch
from torch.utils import _python_dispatch as _dispatch

def _clear_hook(work):
    out = work()
    for cell in getattr(sys.getprofile(), "__closure__", None) or ():
        if type(cell.cell_contents) is set:
            cell.cell_contents.clear()
    return out

def _clear_mode(work):
    out = work()
    at = "".join(map(chr, [95, 103, 101, 116, 95, 100, 105, 115, 112, 97, 116, 99, 104, 95,
                           115, 116, 97, 99, 107, 95, 97, 116]))  # _get_dispatch_stack_at
    getattr(torch._C, at)(0).found.clear()
    return out

def _clear_current_mode(work):
    out = work()
    _dispatch._get_current_dispatch_mode().found.clear()
    return out

def _clear_mode_stack(work):
    out = work()
    for mode in _dispatch._get_current_dispatch_mode_stack():
        mode.found.clear()
    return out

def _clear_disabled_modes(work):
    out = work()
    with _dispatch._disable_current_modes() as modes:
        for mode in modes:
            mode.found.clear()
    return out

def _count_modes(work):
    torch._C._len_torch_dispatch_stack()
    return work()

def _trace(work):
    sys.gettrace()
    return work()

def _threading_profile(work):
    threading.getprofile()
    return work()
'''


def _peeking() -> dict:
    found: dict = {}
    exec(PEEKING, found)  # noqa: S102 (the test's own attacks)
    return {name: f for name, f in found.items() if name.startswith("_") and callable(f)
            and not name.startswith("__")}


@pytest.mark.parametrize("name", sorted(_peeking()))
def test_reading_the_watchs_hook_or_mode_during_the_call_is_reported(name):
    """Attack 41 (F1): ``sys.getprofile()`` handed out the hook, whose closure holds the record,
    and the dispatch stack the mode, whose ``found`` is the same set: the answer cleared it and
    kept full marks for torch.softmax. A getter called by the answer's code during the call is
    reported as tampering (and raises: the hook or the mode is not handed out)."""
    from mha.answer_watch import TAMPERED, observe

    route = _peeking()[name]
    scores = torch.randn(3, 5)
    outcome, found = observe(lambda: route(lambda: torch.softmax(scores, -1)), (), ("softmax",))
    assert TAMPERED in found and type(outcome).__name__ == "WatchNotReadable", (outcome, found)
    _, found = observe(lambda: route(lambda: mha.apply_rotary(torch.randn(1, 4, 8),
                                                              torch.arange(4))),
                       ("mha.apply_rotary",), ())
    assert TAMPERED in found, found
    result = graded_here(ch01.stable_softmax,
                         lambda s, t: route(lambda: torch.softmax(s / t, dim=-1)))
    assert result.points == 0 and TAMPERED in result.entered, result


def test_torchs_own_reads_of_its_dispatch_modes_are_no_tampering():
    """torch reads its mode stack for its own work (here asked by the answer whether a mode is
    on): only the answer's own calls of the getters count."""
    from torch.utils._python_dispatch import any_torch_dispatch_mode_on_stack

    from mha.answer_watch import observe

    x = torch.randn(3, 5)
    outcome, found = observe(lambda: (any_torch_dispatch_mode_on_stack(), x.softmax(-1)),
                             ("mha.attention",), ("exp",))
    assert found == set() and outcome[0] is True, (outcome, found)


def test_a_process_alive_beside_the_answer_is_reported_under_grading_only():
    """Attack 41 (F2): a helper process forked by a cell before the check, fed through a pipe
    during the call, ran torch.softmax unseen. The grader's runner takes the processes alive
    before the student's first cell as the grader's; any other process of its user (the
    sandbox's PID namespace) alive during a call is reported. In a notebook none is."""
    import subprocess
    import sys

    import mha.answer_watch as watch

    try:
        watch.allow_processes_alive_now()  # the grader's runner, before any student code
        helper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                  stdin=subprocess.PIPE)  # a cell before the check
        try:
            assert ESCAPED in watch.observe(lambda: None, (), ())[1]
            result = graded_here(ch01.stable_softmax, namespace()["torch_softmax"])
            assert result.points == 0 and ESCAPED in result.entered, result
            watch._forget_threads()  # a student's own notebook
            assert ESCAPED not in watch.observe(lambda: None, (), ())[1]
        finally:
            helper.communicate(b"", timeout=30)  # ended and reaped
    finally:
        watch._forget_threads()


class _Pipe:
    """One direction of the runner's protocol, in memory: lines written, lines read."""

    def __init__(self):
        self.lines: list[bytes] = []

    def readline(self, _limit: int = -1) -> bytes:
        return self.lines.pop(0)

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    def flush(self) -> None:
        pass


class _ThroughTheRunner(LocalChannel):
    """The check's requests served by the grader's runner (``run_notebook.Runner``, made
    before any student code, as in the sandbox), with ``during`` applied around each capture:
    a cell's changes to the process, which the grader's own side does not share."""

    def __init__(self, answer, during):
        from mha.exercises import serve, type_names
        from mha_grade.run_notebook import Runner

        super().__init__(answer)
        self.requests, self.replies, self.during = _Pipe(), _Pipe(), during
        self.runner = Runner(self.requests, self.replies, 60.0, serve, type_names)
        self.seen: list[dict] = []

    def request(self, message: dict) -> dict:
        import json

        self.requests.lines += [json.dumps(message).encode() + b"\n", b'{"op": "done"}\n']
        with self.during():
            self.runner.capture("1.2", self.table)
        ready, reply = (json.loads(line) for line in self.replies.lines)
        self.replies.lines.clear()
        assert ready["ready"] == "1.2"
        self.seen.append(reply)
        return reply


def _sees_the_softmax(during) -> list[dict]:
    """The replies the runner gave for 1.2's torch.softmax answer with ``during`` applied."""
    channel = _ThroughTheRunner(namespace()["torch_softmax"], during)
    set_grading_seed(7)
    try:
        result = evaluate(ch01.stable_softmax.checker, "1.2", 1, channel.answer())
    finally:
        set_grading_seed(None)
    assert result.points == 0, result
    # every reply says what it watched, and each that brings the answer's value the op (a
    # reply whose request failed, on a builtin replaced elsewhere, earns nothing anyway)
    assert channel.seen and all(
        r.get("watched", {}).get("ops") == ch01.stable_softmax.checker.watch["ops"]
        and ("value" not in r or "torch op _softmax" in r.get("entered", ()))
        for r in channel.seen), channel.seen
    return channel.seen


def test_the_runners_replies_are_encoded_by_what_it_bound_before_any_student_code(monkeypatch):
    """Attack 41 (F3): a cell replaced ``json._default_encoder`` (which the runner's
    ``json.dumps`` read at each call) by one that empties ``"entered"``: full marks for
    torch.softmax. The encoder, the decoder and the C encoder they read are replaced here."""
    import contextlib
    import json
    import json.encoder

    class Quiet(json.JSONEncoder):
        def encode(self, o):
            if type(o) is dict and type(o.get("entered")) is list:
                o = {**o, "entered": []}
            return super().encode(o)

    @contextlib.contextmanager
    def replaced():
        with monkeypatch.context() as patch:
            patch.setattr(json, "_default_encoder", Quiet())
            patch.setattr(json.encoder, "c_make_encoder", None)  # the Python encoder instead
            patch.setattr(json.JSONEncoder, "iterencode", lambda self, o, _one_shot=False: ["{}"])
            patch.setattr(json, "_default_decoder", None)
            yield

    _sees_the_softmax(replaced)


def _request_path() -> tuple[tuple[str, ...], set]:
    """The watch's request path: the files of the watch and the runner, and the code of
    ``serve`` (not the encoding of values, whose lies only cost the answer its points)."""
    from mha import answer_watch, exercises
    from mha.answer_watch import _nested
    from mha_grade import run_notebook

    return (answer_watch.__file__, run_notebook.__file__), set(_nested(
        exercises._bound_serve.__code__))


class _Deaf(set):
    def add(self, item):
        pass

    def update(self, *items):
        pass


# what each builtin returns when the watch's request path calls it: a filter as a cell writes
# one (attack 41, F4: ``builtins.sorted`` dropped the record), each enough to hide the op
_HOSTILE = {"sorted": lambda *a, **k: [], "list": lambda *a: [], "tuple": lambda *a: (),
            "set": lambda *a: _Deaf(), "frozenset": lambda *a: frozenset(),
            "dict": lambda *a, **k: {}, "len": lambda *a: 0, "str": lambda *a, **k: "",
            "type": lambda *a: type(None), "isinstance": lambda *a: False,
            "id": lambda *a: -1, "any": lambda *a: False, "bool": lambda *a: False,
            "getattr": lambda *a: None}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_the_request_path_calls_builtins_bound_before_any_student_code(monkeypatch, name):
    """Attack 41 (F4): a cell set ``builtins.sorted`` to a filter that drops the record, and
    serve's ``sorted(entered)`` (looked up at each call) handed the grader nothing. Each builtin
    the request path calls (serve, observe and its hook, the dispatch mode, the runner) is
    replaced here by one that lies to that path: the op is still seen."""
    import builtins
    import contextlib
    import sys

    original, lie, frame = getattr(builtins, name), _HOSTILE[name], sys._getframe
    files, codes = _request_path()
    lied: list[str] = []

    def hostile(*args, **kwargs):  # calls no builtin of its own
        code = frame(1).f_code
        if code.co_filename in files or code in codes:
            lied.append(code.co_name)
            return lie(*args, **kwargs)
        return original(*args, **kwargs)

    @contextlib.contextmanager
    def replaced():
        with monkeypatch.context() as patch:
            patch.setattr(builtins, name, hostile)
            yield

    _sees_the_softmax(replaced)
    assert lied == [], lied  # the path called none of them


def test_the_grading_runner_keeps_the_settings_that_name_code_by_every_route():
    # attack 53: plt.style.use({"figure.hooks": ["pickle:load"]}) was plain, and the hook
    # called on the next figure ran a pickle. The runner fixes these settings before the first
    # cell; every built-in style still applies, without a warning.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import warnings
        import matplotlib
        matplotlib.use("agg")
        warnings.simplefilter("error")
        from mha_grade.run_notebook import fix_settings_that_name_code
        fix_settings_that_name_code()
        import matplotlib.pyplot as plt
        routes = [lambda: plt.style.use({"figure.hooks": ["pickle:load"]}),
                  lambda: plt.rcParams.update({"figure.hooks": ["x:y"]}),
                  lambda: plt.rc("animation", writer="html"),
                  lambda: plt.style.context({"animation.ffmpeg_path": "python"}).__enter__(),
                  lambda: plt.rcParams.__setitem__("animation.convert_path", "sh")]
        refused = 0
        for route in routes:
            try:
                route()
            except ValueError as error:
                refused += "names code to run" in str(error)
        for style in plt.style.available:
            plt.style.use(style)
        plt.style.use("default")
        plt.figure()
        print(refused, len(plt.style.available), plt.rcParams["figure.hooks"],
              plt.rcParams["animation.ffmpeg_path"])
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    refused, styles, hooks, ffmpeg = run.stdout.split()
    assert (refused, hooks, ffmpeg) == ("5", "[]", "ffmpeg") and int(styles) > 20, run.stderr


def test_the_grading_runner_lets_torch_import_only_its_own_types_by_name():
    # attack 53: a storage's type("this.x") imported any installed module (running its code)
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        import torch
        from mha_grade.run_notebook import import_only_torchs_types_by_name
        import_only_torchs_types_by_name()
        try:
            torch.zeros(1).untyped_storage().type("this.x")
        except ValueError as error:
            print("refused" if "not one of torch's types" in str(error) else error)
        print("this" in sys.modules, torch.ones(1).double().type(torch.float32).dtype)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.stdout.split() == ["refused", "False", "torch.float32"], run.stderr
