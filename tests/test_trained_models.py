"""The shipped weights still come from their recipes: each file of ``src/mha/data`` made by
``tools/train_models.py`` stores a fingerprint of the first ``FINGERPRINT_STEPS`` steps of every
model's training (last loss, sums of the parameters); re-running those steps with today's code
must give it again. A change to the models, the data or the training loop that would make the
recipe give other weights fails here in seconds, without a full retrain."""

import pytest
import torch

import mha
from mha.models import trained_models
from mha.models.trained_models import (
    AGREEMENT_RECIPE,
    DECODER_RECIPE,
    TRANSLATOR_RECIPE,
    agreement_translator_fingerprint,
    decoder_fingerprint,
    lookup_encoder_fingerprint,
    saved_fingerprints,
    translator_fingerprint,
)


def assert_same_fingerprint(new, saved):
    assert new.keys() == saved.keys()
    for key in saved:
        assert new[key] == pytest.approx(saved[key], rel=1e-5, abs=1e-6), key


def test_encoder_training_starts_as_when_the_shipped_weights_were_made():
    torch.set_num_threads(1)
    assert_same_fingerprint(lookup_encoder_fingerprint(),
                            saved_fingerprints("lookup_encoder.pt")[None])


def test_the_shipped_encoder_solves_chapter_7s_task():
    # chapter 7 asserts this before it prunes anything (its test batch, seed 3)
    tokens, targets = mha.lookup_batch(1000, 12, 16, torch.Generator().manual_seed(3))
    with torch.no_grad():
        accuracy = mha.token_accuracy(mha.load_lookup_encoder()(tokens)[0], targets)
    assert accuracy > 0.97
    assert mha.models.trained_models.lookup_encoder_training_log()["loss"] < 0.2


@pytest.mark.parametrize("name", list(DECODER_RECIPE["variants"]))
def test_decoder_training_starts_as_when_the_shipped_weights_were_made(name):
    torch.set_num_threads(1)
    assert_same_fingerprint(decoder_fingerprint(name), saved_fingerprints("decoders.pt")[name])


@pytest.mark.parametrize("seed", TRANSLATOR_RECIPE["init_seeds"])
def test_translator_training_starts_as_when_the_shipped_weights_were_made(seed):
    torch.set_num_threads(1)
    assert_same_fingerprint(translator_fingerprint(seed),
                            saved_fingerprints("translator.pt")[seed])


@pytest.mark.parametrize("seed", AGREEMENT_RECIPE["init_seeds"])
def test_agreement_translator_training_starts_as_when_the_shipped_weights_were_made(seed):
    torch.set_num_threads(1)
    assert_same_fingerprint(agreement_translator_fingerprint(seed),
                            saved_fingerprints("agreement_translator.pt")[seed])


def test_every_shipped_agreement_translator_translates_every_predictable_token():
    r = AGREEMENT_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    source, target_in, target_out = mha.agreement_translation_batch(
        200, r["seq_len"], dictionary, torch.Generator().manual_seed(7))
    for seed in r["init_seeds"]:
        with torch.no_grad():
            predicted = mha.load_agreement_translator(seed)(source, target_in).argmax(-1)
        # positions 0 and 1 hold the free agreement bits, which nothing can predict
        assert (predicted[:, 2:] == target_out[:, 2:]).double().mean().item() > 0.99, seed
    with pytest.raises(ValueError, match="init_seed"):
        mha.load_agreement_translator(99)


def test_every_shipped_translator_loads_and_translates():
    r = TRANSLATOR_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    source, target_in, target_out = mha.translation_batch(200, r["seq_len"], dictionary,
                                                          torch.Generator().manual_seed(3))
    for seed in r["init_seeds"]:
        model = mha.load_translator(seed)
        with torch.no_grad():
            accuracy = (model(source, target_in).argmax(-1) == target_out).double().mean()
        assert accuracy > 0.99, seed
    with pytest.raises(ValueError, match="init_seed must be one of"):
        mha.load_translator(99)


def test_stopping_early_runs_the_first_steps_of_the_whole_schedule():
    from mha.tasks.neighbour_task import train

    def run(stop_after):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        data = torch.Generator().manual_seed(1)
        snapshots = {}

        def batches(step):
            return torch.randn(8, 2, 4, generator=data), torch.randint(3, (8, 2), generator=data)

        def on_step(step):
            snapshots[step] = [p.detach().clone() for p in model.parameters()]

        train(model, batches, 10, lr=0.1, forward=model, on_step=on_step, stop_after=stop_after)
        return snapshots

    whole, prefix = run(None), run(3)
    assert sorted(prefix) == [0, 1, 2]
    for step in prefix:  # the learning rate follows the 10-step cosine, not a 3-step one
        for a, b in zip(whole[step], prefix[step], strict=True):
            assert torch.equal(a, b)


def test_train_that_raises_puts_back_the_modes_and_grads_and_one_that_returns_ends_in_eval():
    from mha.tasks.neighbour_task import train

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1),
                                torch.nn.Linear(8, 3))
    model.eval()
    model[1].train()  # a mixed tree: each submodule's mode comes back
    old_grads = [torch.full_like(p, 7.0) for p in model.parameters()]
    for p, grad in zip(model.parameters(), old_grads, strict=True):
        p.grad = grad
    before = [p.detach().clone() for p in model.parameters()]
    data = torch.Generator().manual_seed(1)

    def batches(step):
        if step == 1:  # after one full step: the parameters, modes and grads have changed
            raise RuntimeError("the loader died")
        return torch.randn(8, 2, 4, generator=data), torch.randint(3, (8, 2), generator=data)

    with pytest.raises(RuntimeError, match="loader died"):
        train(model, batches, 3, lr=0.1, forward=model)
    assert [m.training for m in model.modules()] == [False, False, True, False]
    assert all(p.grad is grad for p, grad in zip(model.parameters(), old_grads, strict=True))
    assert all(torch.equal(grad, torch.full_like(grad, 7.0)) for grad in old_grads)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))

    model.train()
    train(model, lambda step: (torch.randn(8, 2, 4, generator=data),
                               torch.randint(3, (8, 2), generator=data)), 2, forward=model)
    assert not any(m.training for m in model.modules())  # returns in eval, as documented


@pytest.mark.parametrize("train", [
    lambda: mha.train_lookup_encoder(stop_after=1),
    lambda: trained_models.train_translator(stop_after=1),
    lambda: trained_models.train_agreement_translator(stop_after=1),
    lambda: trained_models.train_decoder_variant("mha", stop_after=1),
    mha.load_lookup_encoder, lambda: mha.load_decoder("mla"), trained_models.load_translator,
    trained_models.load_agreement_translator,
], ids=["lookup_encoder", "translator", "agreement_translator", "decoder_variant",
        "load_lookup_encoder", "load_decoder", "load_translator", "load_agreement_translator"])
def test_training_or_loading_by_a_recipe_leaves_the_callers_global_rng_as_it_was(train):
    """The recipes seed their own stream (torch.random.fork_rng, as train_position_model), and
    a loader's random start is overwritten by the saved weights: the draws a caller makes after
    training or loading are those it would have made without it (tester 47: loading moved
    the caller's RNG)."""
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    train()
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("train, recipe", [
    (trained_models.train_translator, trained_models.TRANSLATOR_RECIPE),
    (trained_models.train_agreement_translator, trained_models.AGREEMENT_RECIPE)])
def test_the_largest_init_seed_whose_batch_seed_torch_takes_trains_and_the_next_is_named(
        train, recipe):
    # the batches' seed is data_seed + 100 init_seed, and torch takes seeds up to 2**64 - 1
    largest = (2**64 - 1 - recipe["data_seed"]) // 100
    train(largest, stop_after=1)
    with pytest.raises(ValueError, match=f"init_seed must lie in 0..{largest}, got {largest + 1}"):
        train(largest + 1, stop_after=1)
