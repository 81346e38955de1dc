"""The checks of chapter 1's exercises accept the reference solutions and reject wrong ones."""

import math

import pytest
import torch

import mha.checks.ch01 as checks

pytestmark = pytest.mark.chapter(1)  # make chapter CHAPTER=01 runs these


def status(check, answer):
    return check(answer).status


# ----- 1.2 stable softmax -----

def stable_softmax(scores, temperature):
    s = scores / temperature
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def naive_softmax(scores, temperature):
    e = torch.exp(scores / temperature)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_over_wrong_dim(scores, temperature):
    return torch.softmax(scores / temperature, dim=0)


def softmax_ignoring_temperature(scores, temperature):
    return stable_softmax(scores, 1.0)


def test_stable_softmax_check_accepts_the_solution_and_refuses_torch_softmax():
    # the exercise says "without calling torch.softmax" (test_answer_watch tries other routes)
    assert status(checks.stable_softmax, stable_softmax) == "correct"
    assert status(checks.stable_softmax, lambda s, t: torch.softmax(s / t, dim=-1)) == "wrong"


def test_stable_softmax_check_refuses_an_answer_that_runs_the_encoder_layers_fast_path():
    """nn.TransformerEncoderLayer in eval mode without gradients is one op whose softmax runs
    inside its kernel, unseen by the watch (attack 43 built 1.2's weights from it): the op
    itself is forbidden."""
    layer = torch.nn.TransformerEncoderLayer(4, 1, dim_feedforward=4, batch_first=True).eval()

    def with_fast_path(scores, temperature):
        with torch.no_grad():
            layer(torch.randn(1, 3, 4))
        return stable_softmax(scores, temperature)

    result = checks.stable_softmax(with_fast_path)
    assert result.status == "wrong" and "forbids" in result.message, result.message


@pytest.mark.parametrize("wrong", [naive_softmax, softmax_over_wrong_dim,
                                   softmax_ignoring_temperature])
def test_stable_softmax_check_rejects_wrong_answers(wrong):
    assert status(checks.stable_softmax, wrong) == "wrong"


@pytest.mark.parametrize("dim", [0, -2])
def test_stable_softmax_check_names_the_dimension_an_answer_normalised_over(dim):
    """Normalised over dim 0 (or the columns) the answer got only "28 of 28 values differ"
    (student 41); each part now names the dimension, also for one row of scores (1, 3)."""
    def over(scores, temperature):
        s = scores / temperature
        e = torch.exp(s - s.max(dim=dim, keepdim=True).values)
        return e / e.sum(dim=dim, keepdim=True)

    result = checks.stable_softmax(over)
    assert result.status == "wrong"
    for part in result.parts:
        assert "normalised over dimension 0, not the last" in part.message, part.message
    assert "normalised over dimension" not in checks.stable_softmax(naive_softmax).message


def test_a_check_reports_not_done_and_errors_without_raising(capsys):
    def not_done(scores, temperature):
        raise NotImplementedError()

    assert status(checks.stable_softmax, not_done) == "not done"
    assert status(checks.stable_softmax, lambda s: s) == "error"  # wrong signature
    out = capsys.readouterr().out
    assert "Exercise 1.2 [0/1]: not done yet" in out
    assert "def " not in out and "max(" not in out, "a check must not print the solution"


# ----- 1.3 causal padding mask -----

def causal_padding_mask(lengths, n):
    positions = torch.arange(n)
    causal = positions[None, :] <= positions[:, None]                # (n, n): key j <= query i
    real_key = positions[None, None, :] < lengths[:, None, None]     # (B, 1, n)
    return causal & real_key


def test_causal_padding_mask_check_accepts_the_solution():
    assert status(checks.causal_padding_mask, causal_padding_mask) == "correct"


@pytest.mark.parametrize("wrong", [
    lambda lengths, n: causal_padding_mask(lengths, n).transpose(-2, -1),   # i and j swapped
    lambda lengths, n: causal_padding_mask(lengths, n).float(),             # not bool
    lambda lengths, n: ~causal_padding_mask(lengths, n),                    # True = blocked
    lambda lengths, n: torch.tril(torch.ones(len(lengths), n, n, dtype=torch.bool)),  # no padding
    lambda lengths, n: causal_padding_mask(lengths, n)[0],                  # batch dropped
])
def test_causal_padding_mask_check_rejects_wrong_answers(wrong):
    assert status(checks.causal_padding_mask, wrong) == "wrong"


def test_the_hidden_part_of_1_3_refuses_a_mask_without_its_causal_part_under_every_seed():
    """Instructor 46: the hidden part drew lengths that were all 1 for 6.8 % of the grading
    seeds, and then a mask of padding alone passed: two students with one bug got 0 or 0.5."""
    from mha.exercises import LocalChannel, evaluate, set_grading_seed

    def padding_only(lengths, n):
        return (torch.arange(n)[None, None, :] < lengths[:, None, None]).expand(-1, n, -1)

    check = checks.causal_padding_mask
    try:
        for grading_seed in range(300):  # 1 - 0.932^300: the old draw passed in some of these
            set_grading_seed(grading_seed)
            result = evaluate(check.checker, check.exercise, check.max_points,
                              LocalChannel(padding_only).answer())
            assert result.points == 0, (grading_seed, result)
    finally:
        set_grading_seed(None)


# ----- 1.5 nearest-key features -----

def nearest_key_features(q, k):
    # q.k' - k'^2/2 = -(q - k')^2/2 + q^2/2, and softmax ignores the q^2/2 shared by a row
    return torch.cat([q, torch.ones_like(q)], dim=-1), torch.cat([k, -k**2 / 2], dim=-1)


def test_nearest_key_features_check_accepts_the_solution():
    assert status(checks.nearest_key_features, nearest_key_features) == "correct"
    # any per-token features with the same dot products do too: (2q, 2) and (k/2, -k^2/4)
    def scaled(q, k):
        return (torch.cat([2 * q, 2 * torch.ones_like(q)], -1),
                torch.cat([k / 2, -k**2 / 4], -1))

    assert status(checks.nearest_key_features, scaled) == "correct"


def test_nearest_key_features_check_message_for_features_that_see_other_tokens():
    def cheat(q, k):  # solves the look-up, but a key's features use the queries
        return torch.eye(len(q), dtype=q.dtype), -(k - q.T) ** 2

    result = checks.nearest_key_features(cheat)
    assert result.status == "wrong" and "depend on k_j only" in result.message


@pytest.mark.parametrize("wrong", [
    lambda q, k: (q, k),                                                    # raw dot product
    lambda q, k: (torch.cat([q, torch.ones_like(q)], -1), torch.cat([k, k**2 / 2], -1)),
    lambda q, k: (torch.cat([q, q], -1), k),                                # sizes differ
    lambda q, k: (torch.eye(len(q), dtype=q.dtype), -(k - q.T) ** 2),     # keys see the queries
    lambda q, k: (torch.cat([q, torch.ones_like(q)], -1),                  # keys see each other
                  torch.cat([k, -k**2 / 2 + k[0]], -1)),
])
def test_nearest_key_features_check_rejects_wrong_answers(wrong):
    assert status(checks.nearest_key_features, wrong) == "wrong"


# ----- 1.6 entropy curve -----

def entropy_curve(scores, temperatures):
    curve = []
    for temperature in temperatures:
        log_p = torch.log_softmax(scores / temperature, dim=-1)
        curve.append(-(log_p.exp() * log_p).sum(dim=-1).mean())
    return torch.stack(curve)


def test_entropy_curve_check_accepts_the_solution():
    assert status(checks.entropy_curve, entropy_curve) == "correct"


@pytest.mark.parametrize("wrong", [
    lambda s, ts: entropy_curve(s, ts) / math.log(2),                  # bits, not nats
    lambda s, ts: torch.stack([-(torch.softmax(s * t, -1) * torch.log_softmax(s * t, -1))
                               .sum(-1).mean() for t in ts]),          # multiplies by T
    lambda s, ts: entropy_curve(s, ts)[:-1],                           # a value missing
])
def test_entropy_curve_check_rejects_wrong_answers(wrong):
    assert status(checks.entropy_curve, wrong) == "wrong"
