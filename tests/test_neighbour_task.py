"""The neighbour task's loss and training loop (`mha.tasks.neighbour_task`): targets that do not
fit the logits, a batch with nothing to score, and what `forward` and `extra_loss` return are
refused up front, naming the argument, and a refused call leaves the model as it was."""

import math

import pytest
import torch
from torch import nn

from mha.tasks.neighbour_task import IGNORE, cross_entropy, train

# make chapter runs these: chapter 7 trains with neighbour_task.train
pytestmark = [pytest.mark.chapter(7)]


class Embedder(nn.Module):
    """A model that returns ``(logits, weights)``, as the course's encoders do."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 5)
        self.drop = nn.Dropout(0.1)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.drop(self.embed(tokens)), None


TOKENS = torch.tensor([[0, 1, 2], [3, 4, 0]])


def test_cross_entropy_equals_a_float64_hand_computation_over_the_scored_positions():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[IGNORE, 1, 4], [2, IGNORE, 0]])
    log_p = logits.double().log_softmax(-1)
    scored = [(0, 1), (0, 2), (1, 0), (1, 2)]
    expected = -sum(log_p[b, i, targets[b, i]].item() for b, i in scored) / len(scored)
    assert math.isclose(cross_entropy(logits, targets).item(), expected, rel_tol=1e-6)


@pytest.mark.parametrize("targets, words", [
    (TOKENS.T.contiguous(), ("targets", "(2, 3)", "(3, 2)", "batches(0)")),  # (n, B)
    (TOKENS.flatten(), ("targets", "(2, 3)", "(6,)")),  # flat (B * n,)
    (TOKENS.float() * 0.99, ("targets", "integer", "float32")),  # .long() made 0.99 class 0
    (TOKENS + 5, ("targets", "0..4", "batches(0)")),  # torch: "Target 7 is out of bounds"
    (torch.full((2, 3), IGNORE), ("targets", "no scored position")),  # a nan loss: "diverged"
])
def test_train_refuses_targets_that_do_not_fit_the_logits(targets, words):
    model = Embedder()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError) as raised:
        train(model, lambda step: (TOKENS, targets), 2)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    assert "diverged" not in str(raised.value)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    assert model.training and all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("kwargs, words", [
    # torch: "Boolean value of Tensor with more than one value is ambiguous"
    ({"extra_loss": lambda: torch.ones(3)}, ("extra_loss", "(3,)", ".sum()")),
    ({"extra_loss": lambda: "0.1"}, ("extra_loss", "str")),
    # torch: "'tuple' object has no attribute 'to'"
    ({"forward": "model"}, ("forward", "function")),
    ({"forward": "tuple"}, ("forward", "tuple", "model(tokens)[0]")),
    # torch: "For 1D input, 1D target must have size 1"
    ({"forward": "flat"}, ("forward", "(B, n, C)", "(6, 5)")),
])
def test_train_names_forward_and_extra_loss_when_what_they_return_is_not_a_loss(kwargs, words):
    model = Embedder()
    forwards = {"tuple": model, "flat": lambda t: model(t)[0].flatten(0, 1)}
    if kwargs.get("forward") in forwards:
        kwargs = {"forward": forwards[kwargs["forward"]]}
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError) as raised:
        train(model, lambda step: (TOKENS, TOKENS), 2, **kwargs)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_train_still_takes_a_scalar_penalty_and_a_forward_that_returns_logits():
    model = Embedder()
    result = train(model, lambda step: (TOKENS, TOKENS), 2, forward=lambda t: model(t)[0],
                   extra_loss=lambda: torch.ones(1).sum() * 0.1)
    assert math.isfinite(result["loss"]) and not model.training
