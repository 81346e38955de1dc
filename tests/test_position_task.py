"""Chapter 6: the previous-token task, and what each position encoding makes of it."""

import pytest
import torch

import mha
from mha.position_task import (
    IGNORE,
    PositionToyModel,
    previous_token_accuracy,
    previous_token_batch,
    train_position_model,
)


def test_previous_token_batch_targets_are_the_previous_tokens():
    g = torch.Generator().manual_seed(0)
    tokens, targets = previous_token_batch(4, 9, 5, g)
    assert tokens.shape == targets.shape == (4, 9)
    assert torch.all(targets[:, 0] == IGNORE)
    assert torch.equal(targets[:, 1:], tokens[:, :-1])
    with pytest.raises(ValueError, match="length must be a positive int, got 0"):
        previous_token_batch(4, 0, 5, g)


def test_model_bad_input():
    with pytest.raises(ValueError, match="encoding must be one of"):
        PositionToyModel("absolute", 8)
    model = PositionToyModel("learned", 8, max_positions=10)
    with pytest.raises(ValueError, match="10 positions, got a sequence of 11"):
        model(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(batch, n\), got \(11,\)"):
        model(torch.zeros(11, dtype=torch.long))


def test_relative_encodings_give_the_same_logits_wherever_a_window_starts():
    """RoPE and ALiBi see only offsets: the logits of a causal prefix do not depend on what
    comes after, and RoPE's do not change when every position is shifted."""
    torch.manual_seed(0)
    tokens = torch.randint(16, (2, 12))
    for encoding in ("rope", "alibi"):
        model = PositionToyModel(encoding, 16).double()
        full = model(tokens)
        torch.testing.assert_close(model(tokens[:, :5]), full[:, :5])
    rope = PositionToyModel("rope", 16).double()
    x = rope.embed(tokens)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    out, _ = rope.attn(x, mask=causal)
    shifted, _ = rope.attn(x, positions=torch.arange(12) + 77, mask=causal)
    torch.testing.assert_close(shifted, out)


def test_which_encodings_solve_the_task_and_which_extrapolate():
    """The chapter's robust findings, trained as in the notebook (length 16, 200 steps, one
    thread: tiny matrices gain nothing from more, and lose much on a busy machine)."""
    acc = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for encoding in mha.position_task.ENCODINGS:
            model = train_position_model(encoding, steps=200, batch=32, seed=0)
            acc[encoding] = {n: previous_token_accuracy(model, n) for n in (16, 64)}
    finally:
        torch.set_num_threads(threads)
    assert acc["none"][16] < 0.5  # content alone cannot find the previous token
    for encoding in ("sinusoidal", "learned", "rope"):
        assert acc[encoding][16] > 0.95
    for encoding in ("sinusoidal", "learned"):  # absolute positions do not extrapolate
        assert acc[encoding][64] < 0.5
    assert acc["rope"][64] > acc["sinusoidal"][64] + 0.1
    assert acc["alibi"][64] > acc["alibi"][16] - 0.25  # ALiBi degrades the least
