"""The chapter-7 exercise checks accept the reference solutions and reject wrong answers."""

import math

import pytest
import torch

import mha
import mha.checks.ch07 as ch07

pytestmark = pytest.mark.chapter(7)  # make chapter CHAPTER=07 runs these


def test_prob_gate_one():
    def right(log_alpha, temperature, low, high):
        return torch.sigmoid(log_alpha - temperature * math.log((1 - low) / (high - 1)))

    def confused_with_nonzero(log_alpha, temperature, low, high):
        return mha.prob_nonzero(log_alpha, temperature, (low, high))

    def not_done(*args):
        raise NotImplementedError()

    assert ch07.prob_gate_one(right).status == "correct"
    assert ch07.prob_gate_one(confused_with_nonzero).status == "wrong"
    assert ch07.prob_gate_one(lambda *a: 0.5).status == "wrong"
    assert ch07.prob_gate_one(not_done).status == "not done"


def test_one_head_per_layer():
    def right(importance):
        keep = torch.zeros(importance.shape, dtype=torch.bool)
        keep[torch.arange(importance.shape[0]), importance.argmax(dim=1)] = True
        return keep

    def weakest(importance):
        return right(-importance)

    assert ch07.one_head_per_layer(right).status == "correct"
    assert ch07.one_head_per_layer(weakest).status == "wrong"
    assert ch07.one_head_per_layer(lambda imp: right(imp).float()).status == "wrong"
    assert ch07.one_head_per_layer(lambda imp: right(imp.T).T).status in ("wrong", "error")


def test_confidence_order():
    assert ch07.confidence_order(mha.pruning_order).status == "correct"
    assert ch07.confidence_order(lambda c: mha.pruning_order(-c)).status == "wrong"
    assert ch07.confidence_order(lambda c: mha.pruning_order(c)[:-1]).status == "wrong"

    def sorts_in_place(c):
        order = mha.pruning_order(c)
        c.zero_()
        return order

    assert ch07.confidence_order(sorts_in_place).status == "wrong"
