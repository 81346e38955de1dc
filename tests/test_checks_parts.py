"""Checks in parts: grading-only (hidden) cases, partial credit, and Gradescope's visibilities.

A check may have several parts, each with its points; a hidden part runs only under grading
(the grader has set a grading seed), never in a student's notebook, whose verdict says that
more is graded. Points are the sum of the parts passed, and the message names the parts. The
grader keeps one row per exercise in grades.csv (points, max_points) and lists the parts in
grading_log.csv's message; results.json has one test per part, a hidden part's with the
visibility the instructor chose (after_due_date unless told otherwise).
"""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from exercise_notebooks import EXAMPLE

import mha.checks.ch00 as ch00
import mha.checks.ch01 as ch01
import mha.checks.ch07 as ch07
from mha.exercises import LocalChannel, Wrong, evaluate, exercise_check, set_grading_seed
from mha_grade import assignments, gradescope, outputs
from mha_grade.compare import Outcome, score


def graded(check, answer, grading_seed: int = 5):
    """The verdict the grader computes: the check in a process with a grading seed."""
    set_grading_seed(grading_seed)
    try:
        return evaluate(check.checker, check.exercise, check.max_points,
                        LocalChannel(answer).answer())
    finally:
        set_grading_seed(None)


def test_a_hidden_part_runs_under_grading_only():
    seen = []

    @exercise_check("9.8", points=0.5, part="shown")
    def check(answer):
        seen.append("shown")
        if answer(1) != 1:
            raise Wrong("not the identity")

    @check.part("secret", points=0.5, hidden=True)
    def _secret(answer):
        seen.append("secret")
        if answer(-7) != -7:
            raise Wrong("a secret message")

    def positive_only(x):
        return abs(x)

    in_notebook = check(positive_only)
    assert seen == ["shown"] and check.max_points == 1
    assert (in_notebook.status, in_notebook.points, in_notebook.max_points) == ("correct", 0.5,
                                                                                 0.5)
    assert "secret" not in in_notebook.message and "a secret message" not in in_notebook.message
    assert "grading also runs 1 hidden part, worth 0.5 points" in in_notebook.message
    seen.clear()
    result = graded(check, positive_only)
    assert seen == ["shown", "secret"]
    assert (result.status, result.points, result.max_points) == ("wrong", 0.5, 1)
    assert "hidden part 'secret' [0/0.5]: a secret message" in result.message


def test_7_4_ties_are_hidden_an_answer_that_keeps_every_maximum_passes_the_notebook_only(
        capsys):
    def every_maximum(importance):  # keeps both heads of a tie: the mistake the part is for
        return importance == importance.max(dim=1, keepdim=True).values

    in_notebook = ch07.one_head_per_layer(every_maximum)
    assert in_notebook.status == "correct" and in_notebook.points == 0.5
    assert "hidden part" in capsys.readouterr().out  # the verdict says more is graded
    for grading_seed in range(5):
        result = graded(ch07.one_head_per_layer, every_maximum, grading_seed)
        assert (result.status, result.points, result.max_points) == ("wrong", 0.5, 1), result
        assert "hidden part 'tied scores, and one head per layer' [0/0.5]" in result.message
        assert "exactly one per layer" in result.message


def test_a_softmax_that_overflows_gets_the_points_of_the_part_it_passes():
    def naive(scores, temperature):  # right on small scores, inf/nan near 1000
        e = torch.exp(scores / temperature)
        return e / e.sum(dim=-1, keepdim=True)

    for result in (ch01.stable_softmax(naive), graded(ch01.stable_softmax, naive)):
        assert (result.status, result.points, result.max_points) == ("wrong", 0.5, 1)
        assert "part 'random scores at temperatures 0.25 to 10' [0.5/0.5]: correct" in \
            result.message
        assert "where exp overflows)' [0/0.5]: for scores" in result.message
        assert "inf or nan" in result.message


def test_a_stub_is_not_done_in_every_part():
    def stub(n):
        raise NotImplementedError

    result = graded(ch00.causal_mask, stub)
    assert (result.status, result.points, result.max_points) == ("not done", 0, 2)
    assert result.message == "not done yet: the answer still raises NotImplementedError"


def test_points_are_whole_or_quarters():
    for bad in (0, -1, 0.3, True, "1"):
        with pytest.raises(TypeError):
            exercise_check("9.9", points=bad)


# --- the grader: one row per exercise with partial points; results.json per part

def squeezed(n):  # right for n >= 2, shape () for n = 1: fails 0.3's hidden part only
    return torch.ones(n, n, dtype=torch.bool).tril().squeeze()


def scaled(q, k):
    return q @ k.T / k.shape[-1] ** 0.5


@pytest.fixture(scope="module")
def outcome():
    """The example chapter graded from verdicts computed as the grader computes them."""
    assignment = assignments.load_assignment(EXAMPLE)
    answers = {"0.2": scaled, "0.3": squeezed}
    results = {}
    for index, info in assignment.info.items():
        check = assignment.checkers[index]
        set_grading_seed(11)
        try:
            results[str(index)] = evaluate(check, info.exercise, info.max_points,
                                           LocalChannel(answers[info.exercise]).answer())
        finally:
            set_grading_seed(None)
    graded_outcome = Outcome("alice.ipynb", assignment)
    score(graded_outcome, results, "", lambda text: text)
    return graded_outcome


def test_grades_csv_keeps_one_row_per_exercise_with_partial_points(outcome):
    rows = {r["exercise"]: r for r in outputs.grade_rows(outcome)}
    assert (rows["0.2"]["points"], rows["0.2"]["max_points"]) == (1, 1)
    assert (rows["0.3"]["points"], rows["0.3"]["max_points"]) == (1, 2)
    log = {r["exercise"]: r for r in outputs.log_rows(outcome)}
    assert log["0.3"]["status"] == "wrong"
    assert log["0.3"]["message"].startswith("part 'n = 2 and two sizes' [1/1]: correct; "
                                            "hidden part 'one token (n = 1), and a longer "
                                            "sequence' [0/1]: for n=1: expected shape (1, 1)")


@pytest.mark.parametrize("visibility", [None, "hidden", "after_published"])
def test_results_json_has_a_test_per_part_hidden_ones_with_the_chosen_visibility(outcome,
                                                                                visibility):
    chosen = visibility or "after_due_date"  # the default
    report = (gradescope.report([outcome], [], []) if visibility is None else
              gradescope.report([outcome], [], [], visibility))
    tests = {t["name"]: t for t in report["tests"] if "max_score" in t}  # 0.1 is by hand
    assert set(tests) == {"alice.ipynb: exercise 0.2",
                          "alice.ipynb: exercise 0.3, part 'n = 2 and two sizes'",
                          "alice.ipynb: exercise 0.3, hidden part 'one token (n = 1), and a "
                          "longer sequence'"}
    shown, hidden = (tests[f"alice.ipynb: exercise 0.3, {k}"] for k in (
        "part 'n = 2 and two sizes'", "hidden part 'one token (n = 1), and a longer sequence'"))
    assert (shown["score"], shown["max_score"], shown["visibility"]) == (1.0, 1.0, "visible")
    assert (hidden["score"], hidden["max_score"], hidden["visibility"]) == (0.0, 1.0, chosen)
    assert "expected shape (1, 1)" in hidden["output"]
    assert tests["alice.ipynb: exercise 0.2"]["visibility"] == "visible"
    assert report["score"] == 2.0
    assert {t["visibility"] for t in report["tests"]} == {"visible", chosen}


def test_results_json_per_part_when_the_notebook_never_reached_the_check():
    assignment = assignments.load_assignment(EXAMPLE)
    crashed = Outcome("bob.ipynb", assignment, problem="the notebook stopped before its end")
    score(crashed, {}, "the notebook stopped before its end", lambda text: text)
    tests = [t for t in gradescope.report([crashed], [], [])["tests"] if "max_score" in t]
    assert [t["score"] for t in tests] == [0.0, 0.0, 0.0]
    assert [t["max_score"] for t in tests] == [1.0, 1.0, 1.0]
    assert all("its check was not reached" in t["output"] for t in tests)


def test_the_zip_keeps_the_instructors_choice_of_visibility(tmp_path):
    bundle = gradescope.build(tmp_path / "gradescope.zip", "03", "after_published")
    with zipfile.ZipFile(bundle) as z:
        z.extract(gradescope.SETTINGS_FILE, tmp_path / "source")
    chosen = {"chapter": "03_attention_with_weights", "hidden_visibility": "after_published",
              "copies": "latest",  # the rule for several copies of the chapter: its default
              "late_penalty": "none"}  # and for late work: its default, no penalty
    assert gradescope.zip_settings(tmp_path / "source") == chosen
    assert json.loads((tmp_path / "source" / gradescope.SETTINGS_FILE).read_text()) == chosen
    assert gradescope.zip_settings(tmp_path) == {"chapter": None,
                                                 "hidden_visibility": "after_due_date",
                                                 "copies": "latest", "late_penalty": "none"}
    with pytest.raises(ValueError):
        gradescope.build(tmp_path / "other.zip", "03", "later")


# --- each hidden part is for a mistake: the mistake passes the notebook's check, not grading

def n_from_lengths(lengths, n):  # 1.3: n taken from the longest sequence, not the argument
    n = int(lengths.max())
    pos = torch.arange(n)
    return (pos[None, :] <= pos[:, None]) & (pos[None, None, :] < lengths[:, None, None])


def squeezed_prefers(x):  # 2.2: right, then squeezed (shape () or (B,) for n = 1)
    dots = x @ x.transpose(-2, -1)
    return (dots > dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)).squeeze()


def repaired_rows(kpm, am):  # 4.2: lets a row with no key attend everywhere, to avoid a NaN
    allowed = torch.ones(1, 1, 1, 1, dtype=torch.bool)
    if kpm is not None:
        allowed = allowed & ~kpm[:, None, None, :]
    if am is not None:
        allowed = allowed & ~am
    return allowed | ~allowed.any(-1, keepdim=True)


def sign_flipped_scores(delta, centre, alpha):  # 5.2: +2 <Delta, delta> taken as -2
    return -alpha * (delta.pow(2).sum(-1) + 2 * (delta * centre).sum(-1))


def squeezed_scores(delta, centre, alpha):  # 5.2: right, then squeezed (shape () for (1, 1, 2))
    return (-alpha * (delta.pow(2).sum(-1) - 2 * (delta * centre).sum(-1))).squeeze()


def squeezed_kernel(layer):  # 5.3: right, then squeezed ((C_out, C_in) for a 1 x 1 kernel)
    import math

    h, d = layer.num_heads, layer.head_dim
    k = math.isqrt(h)
    value = layer.attn.v_proj.weight.reshape(h, d, layer.in_channels)
    output = layer.attn.out_proj.weight.reshape(layer.out_channels, h, d)
    taps = torch.einsum("ohd,hdc->hoc", output, value)
    return taps.reshape(k, k, layer.out_channels, layer.in_channels).permute(2, 3, 0, 1).squeeze()


def first_block_largest(m1, l1, o1, m2, l2, o2):  # 6.3: rescales the second block only
    m = torch.maximum(m1, m2)
    b = torch.exp(m2 - m1)
    return m, l1 + b * l2, o1 + b * o2


def first_tokens(hidden, mask):  # 8.1: averages the first mask.sum() tokens (right padding)
    import torch.nn.functional as F

    rows = [hidden[b, :int(mask[b].sum())].mean(0) for b in range(len(hidden))]
    return F.normalize(torch.stack(rows), dim=-1)


# (module, check, mistake, whether the notebook's visible cases let it through: where they do
# not, the hidden part still fails it, whatever the visible cases drew)
HIDDEN_MISTAKES = [("ch00", "causal_mask", squeezed, True),
                   ("ch01", "causal_padding_mask", n_from_lengths, False),
                   ("ch02", "prefers_other", squeezed_prefers, True),
                   ("ch04", "course_mask", repaired_rows, True),
                   ("ch05", "kernel_from_attention", squeezed_kernel, False),
                   ("ch06", "merge_partials", first_block_largest, False),
                   ("ch08", "mean_pool", first_tokens, True)]


@pytest.mark.parametrize("module,name,mistake,notebook_passes", HIDDEN_MISTAKES,
                         ids=[m.__name__ for _, _, m, _ in HIDDEN_MISTAKES])
def test_a_hidden_part_fails_the_mistake_it_is_for(module, name, mistake, notebook_passes,
                                                   capsys):
    import importlib

    check = getattr(importlib.import_module(f"mha.checks.{module}"), name)
    assert (check(mistake).status == "correct") is notebook_passes
    for grading_seed in range(3):
        result = graded(check, mistake, grading_seed)
        hidden = [p for p in result.parts if p.hidden]
        assert hidden and all(p.status != "correct" and p.points == 0 for p in hidden), result


# --- every part that gives partial credit fails for a named plausible wrong answer

def _stable(scores, temperature):
    s = scores / temperature
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def upper_mask(n):  # 0.3: True above the diagonal (a query sees the future)
    return torch.ones(n, n, dtype=torch.bool).triu()


def temperature_ignored(scores, temperature):  # 1.2
    return _stable(scores, 1.0)


def overflowing(scores, temperature):  # 1.2: no maximum subtracted
    e = torch.exp(scores / temperature)
    return e / e.sum(dim=-1, keepdim=True)


def causal_only(lengths, n):  # 1.3: the padding ignored
    return torch.ones(len(lengths), n, n, dtype=torch.bool).tril()


def ties_prefer(x):  # 2.2: >= instead of >
    dots = x @ x.transpose(-2, -1)
    return (dots >= dots.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)) & ~torch.eye(
        x.shape[-2], dtype=torch.bool)


def untransposed(w_q, w_k, w_v):  # 3.1: weights copied without .T
    import mha

    layer = mha.SelfAttention(w_q.shape[0], key_dim=w_q.shape[1], value_dim=w_v.shape[1])
    with torch.no_grad():
        for linear, w in ((layer.w_q, w_q), (layer.w_k, w_k), (layer.w_v, w_v)):
            linear.weight.copy_(w.reshape(linear.weight.shape))
    return layer


def values_as_wide_as_tokens(w_q, w_k, w_v):  # 3.1: assumes d_v = d
    import mha

    d = w_q.shape[0]
    layer = mha.SelfAttention(d, key_dim=w_q.shape[1], value_dim=d)
    with torch.no_grad():
        layer.w_q.weight.copy_(w_q.T)
        layer.w_k.weight.copy_(w_k.T)
        layer.w_v.weight.zero_()
        width = min(d, w_v.shape[1])
        layer.w_v.weight[:width].copy_(w_v.T[:width])
    return layer


def torch_convention(kpm, am):  # 4.2: True = blocked kept, not inverted
    return ~repaired_rows(kpm, am)


def spatially_transposed(layer):  # 5.3: head h taken as tap [h % K, h // K]
    import math

    h, d = layer.num_heads, layer.head_dim
    k = math.isqrt(h)
    value = layer.attn.v_proj.weight.reshape(h, d, layer.in_channels)
    output = layer.attn.out_proj.weight.reshape(layer.out_channels, h, d)
    taps = torch.einsum("ohd,hdc->hoc", output, value)
    return taps.reshape(k, k, layer.out_channels, layer.in_channels).permute(2, 3, 1, 0)


def not_rescaled(m1, l1, o1, m2, l2, o2):  # 6.3: partial sums added as they are
    return torch.maximum(m1, m2), l1 + l2, o1 + o2


def larger_block(m1, l1, o1, m2, l2, o2):  # 6.3: the block with the larger maximum, alone
    first = m1 >= m2
    return (torch.where(first, m1, m2), torch.where(first, l1, l2),
            torch.where(first, o1, o2))


def least_important(importance):  # 7.4: argmin
    keep = torch.zeros(importance.shape, dtype=torch.bool)
    keep[torch.arange(importance.shape[0]), importance.argmin(dim=1)] = True
    return keep


def every_maximum(importance):  # 7.4: both heads of a tie
    return importance == importance.max(dim=1, keepdim=True).values


def padding_averaged(hidden, mask):  # 8.1: the padding averaged in too
    import torch.nn.functional as F

    return F.normalize(hidden.mean(dim=1), dim=-1)


def _gqa_right(q, k, v, causal=True):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def not_causal(q, k, v):  # 9.2: later keys seen
    return _gqa_right(q, k, v, causal=False)


def squeezed_gqa(q, k, v):  # 9.2: right, then squeezed (a batch of one or one token)
    return _gqa_right(q, k, v).squeeze()


# (module, check, part name) -> a wrong answer that part fails, under every seed tried
WRONG_FOR_PART = {
    ("ch00", "causal_mask", "n = 2 and two sizes"): upper_mask,
    ("ch00", "causal_mask", "one token (n = 1), and a longer sequence"): squeezed,
    ("ch01", "stable_softmax", "random scores at temperatures 0.25 to 10"): temperature_ignored,
    ("ch01", "stable_softmax", "scores near +-1000 and temperature 0.001 (where exp "
                               "overflows)"): overflowing,
    ("ch01", "causal_padding_mask", "batches of padded sequences"): causal_only,
    ("ch01", "causal_padding_mask", "n = 1, and sequences all shorter than n"): n_from_lengths,
    ("ch02", "prefers_other", "collinear, integer and real-valued tokens"): ties_prefer,
    ("ch02", "prefers_other", "one token (n = 1), and a zero token among others"):
        squeezed_prefers,
    ("ch03", "self_attention_from_matrices", "W_Q, W_K of shape (5, 3) or (4, 4)"): untransposed,
    ("ch03", "self_attention_from_matrices", "d_k = 1 with values wider than the tokens, and "
                                             "n = 1"): values_as_wide_as_tokens,
    ("ch04", "course_mask", "either mask, and both"): torch_convention,
    ("ch04", "course_mask", "rows with no key allowed (all False)"): repaired_rows,
    ("ch05", "quadratic_scores", "offsets of shapes (2,), (5, 2) and (3, 4, 2)"):
        sign_flipped_scores,
    ("ch05", "quadratic_scores", "offsets with dimensions of size one, (1, 1, 2), and none, "
                                 "(0, 2)"): squeezed_scores,
    ("ch05", "kernel_from_attention", "3 x 3 and 5 x 5 kernels"): spatially_transposed,
    ("ch05", "kernel_from_attention", "a 1 x 1 kernel (one head), one output channel"):
        squeezed_kernel,
    ("ch06", "merge_partials", "random blocks, and scores near 1000"): not_rescaled,
    ("ch06", "merge_partials", "maxima a thousand apart, in both orders, beside rows where "
                               "both count"): larger_block,
    ("ch07", "one_head_per_layer", "random importance scores"): least_important,
    ("ch07", "one_head_per_layer", "tied scores, and one head per layer"): every_maximum,
    ("ch08", "mean_pool", "padding after the real tokens"): padding_averaged,
    ("ch08", "mean_pool", "padding before the real tokens (left padding)"): first_tokens,
    ("ch09", "gqa_attention", "groups of 1 to 4 query heads"): not_causal,
    ("ch09", "gqa_attention", "one token, a batch of one, groups of 5 and 12"): squeezed_gqa,
}


@pytest.mark.parametrize("module,name,part", list(WRONG_FOR_PART),
                         ids=[f"{m}.{n}:{WRONG_FOR_PART[(m, n, p)].__name__}"
                              for m, n, p in WRONG_FOR_PART])
def test_each_part_fails_its_named_wrong_answer(module, name, part):
    import importlib

    check = getattr(importlib.import_module(f"mha.checks.{module}"), name)
    # many seeds: a part whose draw let a wrong answer through for 6.8 % of them scored one
    # bug 0 or 0.5 by luck (instructor 46, exercise 1.3)
    for grading_seed in range(20):
        result = graded(check, WRONG_FOR_PART[(module, name, part)], grading_seed)
        verdict = next(p for p in result.parts if p.name == part)
        assert verdict.status != "correct" and verdict.points == 0, (grading_seed, verdict)
