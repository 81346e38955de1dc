"""The example checks (mha.checks.ch00) and the check wrapper's verdict line."""

import math

import pytest
import torch

import mha.checks.ch00 as ch00
from mha.exercises import Wrong, exercise_check


def scaled_scores(q, k):
    return torch.einsum("id,jd->ij", q, k) / math.sqrt(k.shape[-1])


def causal_mask(n):
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    return j <= i


def test_scaled_scores_accepts_the_reference_and_agrees_with_sdpa():
    assert ch00.scaled_scores(scaled_scores).status == "correct"
    # the check's reference is right: the weights softmax of it equals torch's attention
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.eye(5)
    torch.testing.assert_close(torch.softmax(scaled_scores(q, k), -1),
                               torch.nn.functional.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("wrong,why", [
    (lambda q, k: q @ k.T, "too large by a factor of 2"),  # no scale (d_k = 4)
    (lambda q, k: q @ k.T / q.shape[-1], "too small by a factor of 2"),  # d_k, not its root
    (lambda q, k: q @ k.T / 2 + 0.1, "values differ"),
    (lambda q, k: (q @ k.T).tolist(), "expected a torch.Tensor"),
    (lambda q, k: k @ q.T / math.sqrt(q.shape[-1]), "expected shape (3, 5)"),
])
def test_scaled_scores_rejects_wrong_answers_and_says_which_input(wrong, why, capsys):
    result = ch00.scaled_scores(wrong)
    assert result.status == "wrong" and result.points == 0
    assert why in result.message and "for q of shape (3, 4)" in result.message


def test_causal_mask_accepts_the_reference_and_it_is_sdpas_causal_mask():
    assert ch00.causal_mask(causal_mask).status == "correct"
    q = k = torch.randn(4, 3)
    v = torch.randn(4, 2)
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(4)),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("wrong,why", [
    (lambda n: torch.ones(n, n).triu().bool(), "for n=2: entry (0, 1) is True"),
    (lambda n: torch.ones(n, n).tril(), "expected a bool tensor"),
    (lambda n: torch.ones(n, n + 1, dtype=torch.bool).tril(), "expected shape (2, 2)"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "entry (0, 0) is False"),
])
def test_causal_mask_rejects_wrong_answers(wrong, why):
    result = ch00.causal_mask(wrong)
    assert result.status == "wrong" and why in result.message


def test_a_stub_is_not_done_and_an_answer_that_crashes_is_an_error(capsys):
    def stub(n):
        raise NotImplementedError()

    assert ch00.causal_mask(stub).status == "not done"
    assert ch00.causal_mask(lambda n: 1 / 0).status == "error"
    out = capsys.readouterr().out.splitlines()
    # in a notebook the hidden part (1 of the 2 points) does not run, and the verdict says so
    assert out[0] == ("✗ Exercise 0.3 [0/1]: not done yet: the answer still raises "
                      "NotImplementedError (grading also runs 1 hidden part, worth 1 point, on "
                      "cases not shown here)")
    assert out[1].startswith("✗ Exercise 0.3 [0/1]: your answer raised ZeroDivisionError")


def test_the_verdict_is_the_only_line_that_starts_with_a_mark(capsys):
    """What the answer prints, and a message with line breaks, cannot pose as a verdict."""

    @exercise_check("9.9", points=1)
    def check(answer):
        answer()
        raise Wrong("first line\n✓ Exercise 9.9 [1/1]: correct")

    def sneaky():
        print("✓ Exercise 9.9 [1/1]: correct")

    result = check(sneaky)
    assert result.points == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["    ✓ Exercise 9.9 [1/1]: correct",
                     "✗ Exercise 9.9 [0/1]: first line ✓ Exercise 9.9 [1/1]: correct"]
    assert [ln for ln in lines if ln[:1] in "✓✗"] == [lines[-1]]


def test_what_the_answer_prints_is_shown_but_capped(capsys):
    def chatty(n):
        for i in range(1000):
            print(f"step {i}")
        return causal_mask(n)

    assert ch00.causal_mask(chatty).status == "correct"
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["    step 0", "    step 1"] and len(lines) == 22
    assert lines[-2] == "    ... (2980 more lines printed by your answer)"  # 3 sizes of n
    assert lines[-1] == ("✓ Exercise 0.3 [1/1]: correct (grading also runs 1 hidden part, "
                         "worth 1 point, on cases not shown here)")
