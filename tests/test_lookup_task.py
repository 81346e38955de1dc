"""The look-up task's evaluation and training (`mha.tasks.lookup_task`): the error is measured
with dropout off whatever mode the model is in, and training leaves the model ready to
evaluate."""

import copy

import pytest
import torch

import mha
from mha.tasks.lookup_task import lookup_task

# make chapter runs these: chapters 3 and 4 train look-up models
pytestmark = [pytest.mark.chapter(3), pytest.mark.chapter(4)]

N, M = 4, 3  # tokens, content size: d = 2 * 4 + 3 = 11


def dropout_model() -> mha.LookupModel:
    torch.manual_seed(0)
    return mha.LookupModel(mha.MultiHeadAttention(11, 1, dropout=0.5), 11, M)


def error_by_hand(model: torch.nn.Module, batch: int, seed: int) -> float:
    """``E||f(x) - y||^2 / E||y||^2`` in float64, on a copy of the model in eval mode."""
    x, y, _ = lookup_task(batch, N, M, generator=torch.Generator().manual_seed(seed))
    reference = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return ((reference(x.double()) - y.double()).square().mean()
                / y.double().square().mean()).item()


def test_relative_error_measures_with_dropout_off_and_gives_the_mode_back():
    model = dropout_model()  # a new module is in training mode: dropout on
    first = mha.relative_error(model, N, M, batch=32, seed=3)
    assert first == mha.relative_error(model, N, M, batch=32, seed=3)  # no dropout draw
    assert first == pytest.approx(error_by_hand(model, 32, 3), rel=1e-5)
    assert model.training and model.attention.training  # the mode it had, back
    model.attention.eval()  # a mix of modes comes back as it was
    mha.relative_error(model, N, M, batch=32, seed=3)
    assert model.training and not model.attention.training


def test_relative_error_gives_the_mode_back_when_the_model_raises():
    model = dropout_model()
    with pytest.raises(ValueError, match="query"):
        mha.relative_error(model, N + 1, M, batch=4)  # d = 13: not the model's 11 features
    assert model.training and model.attention.training


def test_train_lookup_trains_in_training_mode_and_ends_in_eval_mode():
    model = dropout_model().eval()
    modes = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    mha.train_lookup(model, N, M, steps=2, batch=8)
    assert modes == [True, True]
    assert not any(module.training for module in model.modules())


def test_train_lookup_gives_every_mode_back_when_it_raises():
    model = dropout_model()
    model.attention.eval()
    with pytest.raises(ValueError):
        mha.train_lookup(model, N + 1, M, steps=2, batch=8)  # the model refuses the tokens
    assert model.training and not model.attention.training


@pytest.mark.parametrize("default", [torch.float64, torch.float16])
def test_lookup_task_draws_in_the_default_dtype(default):
    """The docstring said float32; x was float32 beside float16 contents, float64 beside
    float64 ones. Now both are the default dtype."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        x, target, source = lookup_task(2, N, M, generator=torch.Generator().manual_seed(0))
    finally:
        torch.set_default_dtype(previous)
    assert (x.dtype, target.dtype, source.dtype) == (default, default, torch.int64)
    for documented in (lookup_task, mha.relative_error, mha.train_lookup):
        assert "torch's default dtype" in " ".join(documented.__doc__.split())
    # the task itself, read back: each token's target is the content of its source token
    contents = x[..., 2 * N:].double()  # after the one-hot name and want
    expected = torch.gather(contents, 1, source.expand(-1, -1, M))
    assert torch.equal(target.double(), expected)
    assert torch.equal(x[..., :2 * N].sum(-1), torch.full((2, N), 2.0, dtype=default))


@pytest.mark.parametrize("run", [
    lambda model: mha.relative_error(model, N, M, batch=8),
    lambda model: mha.train_lookup(model, N, M, steps=1, batch=8)])
def test_a_model_in_another_dtype_than_the_task_is_named_not_x(run):
    """The layer's error told the caller to convert x, a tensor they never hold."""
    torch.manual_seed(0)
    model = mha.LookupModel(mha.SelfAttention(11), 11, M).double()
    held = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"^model's parameters are torch\.float64, but the "
                                         r"look-up task's batches .* torch\.float32: convert "
                                         r"the model with model\.to\(torch\.float32\)") as raised:
        run(model)
    assert "x.to" not in str(raised.value)
    assert all(torch.equal(a, b) for a, b in zip(held, model.parameters(), strict=True))
    run(model.float())  # the advice, followed
