"""Seed claims 7.1-7.4 reproduced on chapter 7's shipped encoder, with the chapter's numbers.

The same recipe as notebooks/07_head_pruning.ipynb: test set of 1000 sequences (seed 3),
importance from two batches of 250 (seed 4), "removable" = every prefix costs < 1 point.
"""

import pytest
import torch

import mha
from mha.tasks.neighbour_task import cross_entropy

pytestmark = pytest.mark.chapter(7)  # make chapter runs this file (issue 38)

N, V = 12, 16


@pytest.fixture(scope="module")
def toy():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = mha.load_lookup_encoder()
    tokens, targets = mha.lookup_batch(1000, N, V, torch.Generator().manual_seed(3))

    @torch.no_grad()
    def accuracy(mask=None):
        return mha.token_accuracy(model(tokens, head_mask=mask)[0], targets)

    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)
    yield dict(model=model, tokens=tokens, accuracy=accuracy, weights=weights,
               base=accuracy())
    torch.set_num_threads(threads)


def roles(toy):
    real = torch.ones_like(toy["tokens"], dtype=torch.bool)
    real[:, 0] = False  # the start symbol
    symbols = toy["tokens"][:, 1:]
    out = {}
    for layer, w in enumerate(toy["weights"]):
        offsets, shares = mha.relative_offsets(w, real)
        content = mha.same_token_weight(w[:, :, 1:, 1:], symbols)
        for head in range(w.shape[1]):
            out[layer, head] = dict(offset=int(offsets[head]), share=shares[head].item(),
                                    content=content[head].item())
    repeats = (symbols[:, :, None] == symbols[:, None, :]).sum(-1) > 1
    return out, repeats.double().mean().item()


def importance(toy):
    model = toy["model"]
    gen = torch.Generator().manual_seed(4)
    batches = [mha.lookup_batch(250, N, V, gen) for _ in range(2)]

    def loss(batch, gates):
        return cross_entropy(model(batch[0], head_mask=gates)[0], batch[1])

    return mha.head_importance(loss, batches, 2, 8)


def removable(toy, order, drop=0.01):
    masks = mha.masks_along(order, (2, 8))
    k = 0
    while k + 1 < len(masks) and toy["accuracy"](masks[k + 1]) > toy["base"] - drop:
        k += 1
    return k


@pytest.mark.claim("7.1")
def test_toy_heads_specialise_by_layer_but_only_one_passes_the_positional_test(toy):
    r, ceiling = roles(toy)
    assert all(r[0, head]["offset"] == -1 for head in range(8))  # layer 0: one step back
    assert sum(r[1, head]["offset"] == +1 for head in range(8)) == 7  # layer 1: forward
    assert [key for key, v in r.items() if v["share"] >= 0.9] == [(0, 2)]  # Voita's 90% bar
    assert 0.45 < ceiling < 0.55  # no content score can exceed the share of repeats
    assert max(v["content"] for v in r.values()) < ceiling / 2  # no content head


@pytest.mark.claim("7.2")
def test_toy_loses_under_one_point_for_only_3_of_16_heads(toy):
    assert toy["base"] > 0.97
    order = mha.pruning_order(importance(toy))
    assert removable(toy, order) == 3  # 19%: the toy has few heads to spare
    assert removable(toy, order[::-1]) == 0


@pytest.mark.claim("7.3")
def test_toy_layers_cannot_be_reduced_to_one_head_at_test_time(toy):
    best = []
    for layer in range(2):
        scores = []
        for head in range(8):
            mask = torch.ones(2, 8)
            mask[layer] = 0.0
            mask[layer, head] = 1.0
            scores.append(toy["accuracy"](mask))
        best.append(max(scores))
    assert best[0] == pytest.approx(0.502, abs=0.01)  # about 50%
    assert best[1] == pytest.approx(0.699, abs=0.01)  # about 70%
    assert max(best) < toy["base"] - 0.25  # far beyond one point
    assert round(100 * toy["base"]) == 98  # "against 98%", the model with every head


@pytest.mark.claim("7.4")
def test_toy_has_one_interpretable_head_which_gradient_importance_removes_fifth(toy):
    r, _ = roles(toy)
    interpretable = [key for key, v in r.items() if v["share"] >= 0.9]
    assert interpretable == [(0, 2)]  # one head: too few to test a trend
    assert mha.pruning_order(importance(toy)).index((0, 2)) == 4


def test_the_ranking_removes_four_layer_1_heads_before_any_layer_0_head(toy):
    """Chapter 7: layer 1's one dominant head leaves its other scores small after the per-layer
    normalisation, so the first four heads removed come from layer 1; the fifth is (0, 2)."""
    assert mha.pruning_order(importance(toy))[:5] == [(1, 3), (1, 2), (1, 5), (1, 4), (0, 2)]


def test_seven_of_eight_layer_1_heads_park_more_than_any_layer_0_head(toy):
    """Weight that real queries put on the start symbol: every layer-1 head but head 0 parks
    more than the most any layer-0 head parks."""
    parked = [w[:, :, 1:, 0].mean(dim=(0, 2)) for w in toy["weights"]]  # per layer: (8,)
    above = [head for head in range(8) if parked[1][head] > parked[0].max()]
    assert above == [1, 2, 3, 4, 5, 6, 7]
