"""Chapter 6: the previous-token task, and what each position encoding makes of it."""

import functools
import itertools
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
from mha.tasks import position_task
from mha.tasks.position_task import (
    IGNORE,
    PositionToyModel,
    order_blind_accuracy,
    previous_token_accuracy,
    previous_token_batch,
    score_offset_share,
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



def test_train_position_model_leaves_the_callers_rng_and_draws_its_own_from_seed():
    """It seeded the global RNG: every draw of the caller after the call depended on seed."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    trained = train_position_model("learned", length=8, steps=2, batch=4, seed=0)
    assert torch.equal(torch.rand(3), expected)
    # the initial weights are still those of the global RNG seeded with seed: the rows past
    # the training length get no gradient, so they are the untrained table's
    torch.manual_seed(0)
    untrained = PositionToyModel("learned", 16).positions.weight
    assert torch.equal(trained.positions.weight[8:], untrained[8:])

def test_model_bad_input():
    with pytest.raises(ValueError, match="encoding must be one of"):
        PositionToyModel("absolute", 8)
    model = PositionToyModel("learned", 8, max_positions=10)
    with pytest.raises(ValueError, match="10 positions, got a sequence of 11 starting at 0"):
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


def accuracy_by_position(model, n, batch=256, seed=1):
    tokens, targets = previous_token_batch(batch, n, 16, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        predicted = model(tokens).argmax(dim=-1)
    return (predicted == targets).float().mean(dim=0)[1:]  # positions 1 .. n-1


def attention_weights_per_head(model, n, batch=64, seed=1):
    """Attention weights (heads, n, n) of the model's one layer, averaged over sequences."""
    tokens, _ = previous_token_batch(batch, n, 16, torch.Generator().manual_seed(seed))
    captured = []
    hook = model.attn.register_forward_hook(lambda module, args, out: captured.append(out[1]))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        hook.remove()
    return captured[0].mean(dim=0)


@functools.cache
def trained(encoding, seed):
    """A model trained as in the notebook (length 16, 200 steps, one thread: tiny matrices gain
    nothing from more, and lose much on a busy machine), once per module: several tests read the
    sinusoidal ones. Training draws everything from ``seed``, so a second run would be equal."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_position_model(encoding, steps=200, batch=32, seed=seed)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.claim("6.8")
@pytest.mark.parametrize("seed", range(3))
def test_x_plus_p_trained_from_position_0_attends_by_absolute_position_in_every_head(seed):
    """Row 6.8, "easily learn to attend by relative positions", trained with every sequence at
    positions 0..15, where an absolute rule fits the data as well as one by offset. A score rule by
    offset (contents and i - j) gives the keys at the trained offsets 0..15 of a query at 17..20 the
    scores the keys of query 15 (the last trained position) had, in distribution; the keys at
    offsets >= 16 can only take weight away. So under such a rule the previous token's mean weight
    at queries 17-20 is at least its weight at query 15 minus the weight on offsets >= 16. The
    models trained with X + P (length 16, three seeds) break that in every head: more than 0.3 on
    the previous token at queries 1-15, less than 0.05 on offsets >= 16 at queries 17-20, and yet
    less than half the query-15 weight on the previous token there."""
    weights = attention_weights_per_head(trained("sinusoidal", seed), 64)  # (heads, 64, 64)
    on_previous = torch.diagonal(weights, -1, dim1=-2, dim2=-1)  # entry i - 1: query i
    at_15, at_17_to_20 = on_previous[:, 14], on_previous[:, 16:20].mean(dim=1)
    untrained = torch.stack([weights[:, i, :i - 15].sum(dim=-1) for i in range(17, 21)], dim=1)
    assert (on_previous[:, :15].mean(dim=1) > 0.3).all(), on_previous[:, :15].mean(dim=1)
    assert (untrained < 0.05).all(), untrained
    assert (at_17_to_20 < at_15 / 2).all(), (at_17_to_20, at_15)
    # the bound a rule by offset would keep, broken in every head
    assert (at_17_to_20 < at_15 - untrained.mean(dim=1)).all()


def accuracy_at_start(model, start, batch=256, seed=1):
    """Share of tokens 1..15 of length-16 sequences at positions start.. predicted right,
    counted here from the logits (not with previous_token_accuracy)."""
    tokens = torch.randint(16, (batch, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        predicted = model(tokens, start).argmax(dim=-1)
    return (predicted[:, 1:] == tokens[:, :-1]).float().mean().item()


def weights_on_previous_token(model, start, batch=64, seed=1):
    """Each head's mean attention weight on the previous token at each query 1..15, (heads, 15),
    for 16 tokens at positions start.."""
    tokens = torch.randint(16, (batch, 16), generator=torch.Generator().manual_seed(seed))
    captured = []
    hook = model.attn.register_forward_hook(lambda module, args, out: captured.append(out[1]))
    try:
        with torch.no_grad():
            model(tokens, start)
    finally:
        hook.remove()
    weights = captured[0].mean(dim=0)  # (heads, 16, 16)
    return torch.stack([weights[:, i, i - 1] for i in range(1, 16)], dim=1)


#: The training regimes of the chapter's experiment, by the positions they cover: 0-15 (16
#: positions), 0-31 (32), 0-15 and 1000-1015 (32, spread), 0-63 (64), 0-79 (80), five windows of
#: 16 in 0-1015 (80, spread) and starts 0-1000 (within 0-1015; 200 batches draw at most 200
#: of the starts). A start is drawn per batch from 0, start_step, .. max_start; "none" is the
#: model without positions, the baseline.
REGIMES = {
    "no positions": dict(length=16),
    "start 0, length 16": dict(length=16),
    "starts 0..16, length 16": dict(length=16, max_start=16),
    "starts 0 or 1000": dict(length=16, max_start=1000, start_step=1000),
    "start 0, length 64": dict(length=64),
    "starts 0..64, length 16": dict(length=16, max_start=64),
    "starts 0, 250, .., 1000": dict(length=16, max_start=1000, start_step=250),
    "starts 0..1000, length 16": dict(length=16, max_start=1000),
}

#: 20 starts spread over 2000-19100, where none of the models was trained.
FAR_STARTS = range(2000, 20000, 900)


@functools.cache
def trained_in_regime(name, seed):
    """The notebook's recipe (200 steps, batch 32, one thread) in one of REGIMES or ONE_FACTOR."""
    if name in ("no positions", "start 0, length 16"):
        return trained("none" if name == "no positions" else "sinusoidal", seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_position_model("sinusoidal", steps=200, batch=32, seed=seed,
                                    **{**REGIMES, **ONE_FACTOR}[name])
    finally:
        torch.set_num_threads(threads)


@functools.cache
def far_start_means(name, seed):
    """(accuracy, (heads, 15) weights on the previous token), both averaged over FAR_STARTS."""
    model = trained_in_regime(name, seed)
    accuracy = np.mean([accuracy_at_start(model, start) for start in FAR_STARTS])
    weights = torch.stack([weights_on_previous_token(model, start) for start in FAR_STARTS])
    return accuracy, weights.mean(dim=0)


def spread(values):
    """(smallest, largest) of a list of numbers."""
    return min(values), max(values)


#: Queries far beyond every model's trained positions (the widest regime ends at 1015): the last
#: query of each far start. Inside a model's own trained positions the share is near 1 whatever
#: the model learned (test_x_plus_p_trained_from_position_0_scores_by_position_far_away).
FAR_QUERIES = range(2015, 19200, 900)

#: Regimes that vary one factor at a time (windows of 16 tokens, 200 steps, unless said), beside
#: those of REGIMES: the unbroken range of positions at 17 starts, the number of starts over
#: positions 0-79, and one sequence of 80 tokens over the same positions.
ONE_FACTOR = {
    "17 starts 0, 2, .., 32": dict(length=16, max_start=32, start_step=2),      # 0-47
    "17 starts 0, 4, .., 64": dict(length=16, max_start=64, start_step=4),      # 0-79
    "17 starts 0, 16, .., 256": dict(length=16, max_start=256, start_step=16),  # 0-271
    "5 starts 0, 16, .., 64": dict(length=16, max_start=64, start_step=16),     # 0-79, tiled
    "start 0, length 80": dict(length=80),                                      # 0-79
}

#: 17 starts (windows of 16) covering an unbroken range: the range -> the regime.
RANGE_AT_17_STARTS = {"0-31": "starts 0..16, length 16", "0-47": "17 starts 0, 2, .., 32",
                      "0-79": "17 starts 0, 4, .., 64", "0-271": "17 starts 0, 16, .., 256"}
#: Windows of 16 over positions 0-79: the number of starts -> the regime.
STARTS_OVER_0_TO_79 = {5: "5 starts 0, 16, .., 64", 17: "17 starts 0, 4, .., 64",
                       65: "starts 0..64, length 16"}


@pytest.fixture(scope="module")
def far_shares():
    """Regime -> score_offset_share at FAR_QUERIES, (3 seeds, 4 heads); each model is trained
    once for the whole module (trained_in_regime), shared with the far-start tests."""
    names = {"start 0, length 16", "starts 0..1000, length 16",
             *RANGE_AT_17_STARTS.values(), *STARTS_OVER_0_TO_79.values(), "start 0, length 80"}
    return {name: torch.stack([score_offset_share(trained_in_regime(name, seed), FAR_QUERIES)
                               for seed in range(3)]) for name in sorted(names)}


def share_range(shares):
    """(smallest, largest) over seeds and heads, and the mean, of a (seeds, heads) tensor."""
    return shares.min().item(), shares.max().item(), shares.mean().item()


#: The verdict's mark: a head scores mostly by offset when its share exceeds one half, where the
#: half-offset, half-position head W = diag(1, 0, ..) sits (0.5072,
#: test_score_offset_share_of_a_one_column_head_is_the_closed_form). A regime passes in a seed
#: when the mean over that seed's four heads exceeds it.
MOSTLY_BY_OFFSET = 0.5


def seed_means(shares):
    """The mean share of each seed's heads, a (seeds,) list, rounded to 2 digits."""
    return [round(v, 2) for v in shares.mean(dim=1).tolist()]


@pytest.mark.claim("6.8")
def test_x_plus_p_trained_from_position_0_scores_by_position_far_away(far_shares):
    """Row 6.8's second half read as "whatever the training data": false. Trained with every
    sequence at positions 0-15 (X + P, base 10000, d = 32, 200 steps, three seeds), each head's
    offset share far beyond training (queries 2015-19115) is 0.05-0.29, mean 0.17, per seed
    0.21, 0.18 and 0.10: no head and no seed above one half, a score that mostly follows the
    positions. Inside the trained positions the same models give 0.97-1.00 (queries 7-15,
    window 8), where a head that scores by the key's position gives 0.06: there the task makes a
    head treat each trained offset alike, so a score fitted to the positions agrees with one by
    offset, and only queries outside every model's training can tell. Checked within 0.02
    (trained weights differ in the last digits between CPUs)."""
    shares = far_shares["start 0, length 16"]
    assert share_range(shares) == pytest.approx((0.05, 0.29, 0.17), abs=0.02)
    assert seed_means(shares) == pytest.approx([0.21, 0.18, 0.10], abs=0.02)
    assert (shares < MOSTLY_BY_OFFSET).all()
    inside = torch.stack([score_offset_share(trained_in_regime("start 0, length 16", seed),
                                             range(7, 16), window=8) for seed in range(3)])
    assert share_range(inside)[:2] == pytest.approx((0.97, 1.00), abs=0.02)
    by_position = score_offset_share(head_scoring_by_the_keys_position(), range(7, 16), window=8)
    assert by_position.max().item() == pytest.approx(0.06, abs=0.01)  # not near 1 in general


@pytest.mark.claim("6.8")
def test_x_plus_p_scores_mostly_by_offset_in_every_seed_once_windows_cover_0_to_79(far_shares):
    """Row 6.8's second half read as "given training that shows offsets across a range of
    positions": true under a condition, judged by the mark of one half (MOSTLY_BY_OFFSET) on
    each seed's mean far share (queries 2015-19115, four heads, 17 starts of 16-token windows).
    Over 0-31 no seed passes (0.31, 0.28, 0.11), as from position 0 alone; over 0-47 two of
    three (0.62, 0.58, 0.44); over 0-79 (0.72, 0.62, 0.58), 0-271 (0.74, 0.65, 0.63) and with
    starts drawn from 0-1000 (0.79, 0.73, 0.62) every seed. Never only by offset: no seed's
    mean comes near 1 (at most 0.79). Seeds, not single heads: 20 far queries do not place a
    head near one half (test_a_heads_share_at_20_far_queries_moves_with_the_queries). Checked
    within 0.02."""
    means = {span: seed_means(far_shares[regime]) for span, regime in RANGE_AT_17_STARTS.items()}
    assert means["0-31"] == pytest.approx([0.31, 0.28, 0.11], abs=0.02)
    assert means["0-47"] == pytest.approx([0.62, 0.58, 0.44], abs=0.02)
    assert means["0-79"] == pytest.approx([0.72, 0.62, 0.58], abs=0.02)
    assert means["0-271"] == pytest.approx([0.74, 0.65, 0.63], abs=0.02)
    widest = far_shares["starts 0..1000, length 16"]
    assert seed_means(widest) == pytest.approx([0.79, 0.73, 0.62], abs=0.02)
    passing = {span: int((far_shares[regime].mean(dim=1) > MOSTLY_BY_OFFSET).sum())
               for span, regime in RANGE_AT_17_STARTS.items()}
    assert passing == {"0-31": 0, "0-47": 2, "0-79": 3, "0-271": 3}
    assert (widest.mean(dim=1) > MOSTLY_BY_OFFSET).all()
    assert max(max(seed_means(shares)) for shares in far_shares.values()) == pytest.approx(
        0.79, abs=0.02)


@pytest.mark.claim("6.8")
def test_over_0_to_47_two_of_three_is_the_count_of_one_set_of_far_queries(far_shares):
    """Row 6.8's counts are taken at one set of 20 far queries, FAR_QUERIES. Over 0-47 "two of
    three" is that set's count: seed 2's mean (0.44 there) is above the mark in about 47 of 200
    other sets of 20 far queries (those of
    test_a_heads_share_at_20_far_queries_moves_with_the_queries; review 41b). Checked within 10
    sets (trained weights differ in the last digits between CPUs)."""
    regime = RANGE_AT_17_STARTS["0-47"]
    assert far_shares[regime][2].mean().item() < MOSTLY_BY_OFFSET
    model = trained_in_regime(regime, 2)
    above = sum(score_offset_share(model, sorted(random.Random(s).sample(range(2015, 19200), 20)))
                .mean().item() > MOSTLY_BY_OFFSET for s in range(200))
    assert above == pytest.approx(47, abs=10)


@pytest.mark.claim("6.8")
def test_x_plus_p_share_far_away_rises_with_the_range_then_levels_off(far_shares):
    """The far share (three seeds, four heads, 17 starts of windows of 16 tokens) against the
    unbroken range the windows cover: mean 0.17 from position 0 alone (0-15), 0.04-0.49 (mean
    0.23) over 0-31, 0.32-0.68 (0.54) over 0-47, 0.55-0.79 (0.64) over 0-79, 0.55-0.86 (0.67)
    over 0-271; with starts drawn from 0-1000 (at most 200 of them), 0.57-0.85 (0.71). It rises
    little up to 0-31, most between 0-31 and 0-47 (by more than 0.25), then levels off (by less
    than 0.15 from 0-47 to 0-79, less than 0.05 from 0-79 to 0-271) well below 1. Each range's
    highest head lies above the next range's lowest. One step budget (200) was tried. Checked
    within 0.02."""
    spreads = [share_range(far_shares[regime]) for regime in
               ("start 0, length 16", *RANGE_AT_17_STARTS.values())]  # 0-15, 0-31, .., 0-271
    assert spreads[1] == pytest.approx((0.04, 0.49, 0.23), abs=0.02)
    assert spreads[2] == pytest.approx((0.32, 0.68, 0.54), abs=0.02)
    assert spreads[3] == pytest.approx((0.55, 0.79, 0.64), abs=0.02)
    assert spreads[4] == pytest.approx((0.55, 0.86, 0.67), abs=0.02)
    widest = share_range(far_shares["starts 0..1000, length 16"])
    assert widest == pytest.approx((0.57, 0.85, 0.71), abs=0.02)
    means = [mean for *_, mean in spreads]
    steps = [b - a for a, b in itertools.pairwise(means)]  # 0-15 -> 0-31 -> 0-47 -> 0-79 -> 0-271
    assert steps[1] > 0.25 and steps[1] == max(steps), steps      # most between 0-31 and 0-47
    assert 0 < steps[0] < 0.15 and 0 < steps[2] < 0.15 and 0 < steps[3] < 0.05, steps
    assert max(high for _, high, _ in spreads) < 0.9
    assert all(high > next_low for (_, high, _), (next_low, _, _) in itertools.pairwise(spreads))


@pytest.mark.claim("6.8")
def test_x_plus_p_share_far_away_hardly_depends_on_the_number_of_starts(far_shares):
    """Over the same positions 0-79, 5 starts (windows tiling 0-79), 17 starts (0, 4, .., 64)
    and 65 starts (0..64) give far shares 0.40-0.72 (mean 0.55), 0.55-0.79 (0.64) and 0.49-0.81
    (0.64), seed means 0.61, 0.50, 0.53 / 0.72, 0.62, 0.58 / 0.76, 0.61, 0.56: 5 starts a
    little lower (by less than 0.15 per seed), 17 like 65,
    while 17 starts over 0-31 give 0.04-0.49 (the test above), more than 0.2 lower on average
    than 5 over 0-79. The number of starts does not decide it. Checked within 0.02."""
    spreads = {starts: share_range(far_shares[regime])
               for starts, regime in STARTS_OVER_0_TO_79.items()}
    assert spreads[5] == pytest.approx((0.40, 0.72, 0.55), abs=0.02)
    assert spreads[17] == pytest.approx((0.55, 0.79, 0.64), abs=0.02)
    assert spreads[65] == pytest.approx((0.49, 0.81, 0.64), abs=0.02)
    assert seed_means(far_shares[STARTS_OVER_0_TO_79[5]]) == pytest.approx([0.61, 0.50, 0.53],
                                                                           abs=0.02)
    assert seed_means(far_shares[STARTS_OVER_0_TO_79[65]]) == pytest.approx([0.76, 0.61, 0.56],
                                                                            abs=0.02)
    many = far_shares[STARTS_OVER_0_TO_79[65]].mean(dim=1)  # (seeds,)
    few = far_shares[STARTS_OVER_0_TO_79[5]].mean(dim=1)
    assert ((many - few).abs() < 0.15).all(), (many, few)   # per seed, within 0.15
    assert share_range(far_shares[STARTS_OVER_0_TO_79[5]])[2] > share_range(
        far_shares["starts 0..16, length 16"])[2] + 0.2


@pytest.mark.claim("6.8")
def test_x_plus_p_one_long_sequence_scores_lower_than_short_windows_on_the_same_positions(
        far_shares):
    """One sequence of 80 tokens from position 0 (positions 0-79, every offset up to 79 shown in
    every batch) gives far shares 0.20-0.65 (mean 0.45), seed means 0.55, 0.44 and 0.37, below
    each of the three short-window regimes over the same positions in every seed. Checked
    within 0.02."""
    long = far_shares["start 0, length 80"]
    assert share_range(long) == pytest.approx((0.20, 0.65, 0.45), abs=0.02)
    assert seed_means(long) == pytest.approx([0.55, 0.44, 0.37], abs=0.02)
    for regime in STARTS_OVER_0_TO_79.values():
        assert (long.mean(dim=1) < far_shares[regime].mean(dim=1)).all(), regime


def test_score_offset_share_matches_the_scores_of_the_forward_pass():
    """score_offset_share computes the scores from the projections by hand; here the same share
    comes from the model's own attention weights: with the mean embedding at every earlier key
    and token t at the query (so also at the key of offset 0, the query itself), the log
    weights equal the scores up to a constant per query, which the share removes; averaged
    over every t they are the mean score over contents, the query's own token included at
    offset 0. Bad input is refused by name."""
    model = trained_in_regime("starts 0..64, length 16", 0)
    queries = range(15, 400, 40)
    tokens = model.embed.weight  # (vocab, 32)
    mean_token = tokens.mean(dim=0)
    causal = torch.ones(16, 16, dtype=torch.bool).tril()
    rows = []
    for i in queries:  # the query at i and its keys i-15..i, as the model sees them
        x = (mean_token + mha.sinusoidal_encoding(i + 1, 32)[i - 15:]).repeat(len(tokens), 1, 1)
        x[:, -1] += tokens - mean_token  # token t at the query  # (vocab, 16, 32)
        with torch.no_grad():
            _, weights = model.attn(x, mask=causal)  # (vocab, heads, 16, 16)
        log_w = weights[:, :, -1].double().log()  # (vocab, heads, 16): keys at offsets 15..0
        centred = log_w - log_w.mean(dim=-1, keepdim=True)
        rows.append(centred.mean(dim=0))  # the mean over the query's token t
    scores = torch.stack(rows)  # (queries, heads, 16)
    within = ((scores - scores.mean(dim=0)) ** 2).sum(dim=(0, 2))
    expected = 1 - within / (scores**2).sum(dim=(0, 2))
    torch.testing.assert_close(score_offset_share(model, queries), expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="model must be a PositionToyModel with the 'sinusoidal'"):
        score_offset_share(trained("none", 0), queries)
    with pytest.raises(ValueError, match="queries must be an int >= 15, got 3"):
        score_offset_share(model, [3])
    with pytest.raises(ValueError, match="queries must hold at least one item"):
        score_offset_share(model, [])


def hand_built_head(q_weight, k_weight, q_bias=None):
    """A float64 X + P toy whose every token embeds to 0 and whose projections are given, so
    each head's score is (p_i W_Q^T + b_Q)_h . (p_j W_K^T)_h / sqrt(8), known in closed form."""
    model = PositionToyModel("sinusoidal", 16).double()
    with torch.no_grad():
        model.embed.weight.zero_()
        model.attn.q_proj.weight.copy_(q_weight)
        model.attn.k_proj.weight.copy_(k_weight)
        model.attn.q_proj.bias.copy_(torch.zeros(32) if q_bias is None else q_bias)
        model.attn.k_proj.bias.zero_()
    return model


def head_scoring_by_the_keys_position():
    """The query's bias alone (W_Q = 0, b_Q = e_0 per head) against the key's column 0: every
    head scores sin(j), the key's absolute position (b_Q (p_j W_K)^T of chapter 6)."""
    q_bias = torch.zeros(32, dtype=torch.float64)
    q_bias[::8] = 1.0
    k_weight = torch.zeros(32, 32, dtype=torch.float64)
    k_weight[::8, 0] = 1.0
    return hand_built_head(torch.zeros(32, 32, dtype=torch.float64), k_weight, q_bias)


#: Many queries spread over 0-20000, where the angles i w of every fast pair are spread evenly.
KNOWN_ANSWER_QUERIES = range(15, 20015)


@pytest.mark.claim("6.8")
def test_a_heads_share_at_20_far_queries_moves_with_the_queries():
    """Why row 6.8 judges seeds by their heads' mean, not single heads against the mark: the
    mark's own head, W = diag(1, 0, ..) (0.5072 over 20000 queries), gives 0.5321 at the 20 far
    queries the verdict uses and 0.38-0.66 (5th to 95th percentile) over 200 other sets of 20
    queries drawn from the same far range (review 40)."""
    w = torch.zeros(32, 32, dtype=torch.float64)
    w[::8, 0] = 1.0
    head = hand_built_head(w, w)
    assert round(score_offset_share(head, FAR_QUERIES)[0].item(), 4) == 0.5321
    shares = sorted(score_offset_share(head, sorted(random.Random(s).sample(range(2015, 19200),
                                                                           20)))[0].item()
                    for s in range(200))
    assert (round(shares[10], 2), round(shares[189], 2)) == (0.38, 0.66)


@pytest.mark.claim("6.8")
def test_score_offset_share_is_1_for_a_rotation_head():
    """Chapter 6's construction W = M_k (W_Q = I, W_K = M_k as weight rows): head h scores
    sum over its 4 pairs of cos(w_c (j + k - i)), a function of the offset alone, so the share
    is 1 in every head, for any k, near the start and far from it."""
    identity = torch.eye(32, dtype=torch.float64)
    for k in (0, 3):
        model = hand_built_head(identity, mha.relative_rotation(k, 32, dtype=torch.float64))
        for queries in (range(15, 1016, 10), range(2015, 19200, 900)):
            torch.testing.assert_close(score_offset_share(model, queries),
                                       torch.ones(4, dtype=torch.float64), atol=1e-9, rtol=0)


@pytest.mark.claim("6.8")
@pytest.mark.parametrize("column", [0, 16])
def test_score_offset_share_of_a_one_column_head_is_the_closed_form(column):
    """W = diag(1, 0, ..) on column c (chapter 6 uses c = 0) scores sin(w i) sin(w j) =
    (cos(w (i - j)) - cos(w (i + j))) / 2: part offset, part position. Over queries whose angles
    2 w i are spread evenly, with A_d = (cos(w d) - its mean over the 16 offsets d) / 2, the
    offset's part is sum A_d^2 and the position's is (16/2)(1 - |mean_d e^{i w d}|^2) / 4: the
    share is their ratio to the sum, 0.5072 for c = 0 (w = 1: half by offset, not near 0), 0.0119
    for the slow c = 16 (w = 0.01: the offset part is second order in w d, the rest first)."""
    weight = torch.zeros(32, 32, dtype=torch.float64)
    weight[::8, column] = 1.0  # row 8h: the first feature of head h reads column c
    w = 10000 ** (-column / 32)
    offsets = np.arange(16)
    offset_part = (((np.cos(w * offsets) - np.cos(w * offsets).mean()) / 2) ** 2).sum()
    position_part = 16 / 2 * (1 - abs(np.exp(1j * w * offsets).mean()) ** 2) / 4
    expected = offset_part / (offset_part + position_part)
    if column == 0:
        assert round(expected, 4) == 0.5072  # half by offset: the mark of row 6.8's verdict
    else:
        assert round(expected, 4) == 0.0119
    share = score_offset_share(hand_built_head(weight, weight), KNOWN_ANSWER_QUERIES)
    torch.testing.assert_close(share, torch.full((4,), expected, dtype=torch.float64),
                               atol=2e-3, rtol=0)


def test_score_offset_share_is_near_0_for_a_score_by_the_keys_position():
    """The query's bias alone (W_Q = 0, b_Q = e_0 per head) against the key's column 0: the
    score sin(j) follows the key's absolute position, b_Q (p_j W_K)^T of chapter 6, and no part
    of it is a function of the offset: the share is near 0 (exactly 0 as the queries' angles
    spread evenly)."""
    model = head_scoring_by_the_keys_position()
    assert (score_offset_share(model, KNOWN_ANSWER_QUERIES) < 1e-3).all()
    assert (score_offset_share(model, range(2015, 19200, 900)) < 0.01).all()


def test_score_offset_share_refuses_what_has_no_share_by_name():
    """A head with no position term (W_K = 0: every key of a query scores alike) has centred
    scores of 0 and no share (0/0, a NaN before); one key per query has nothing to compare."""
    zero = torch.zeros(32, 32, dtype=torch.float64)
    flat = hand_built_head(torch.eye(32, dtype=torch.float64), zero)
    with pytest.raises(ValueError, match=r"model: head\(s\) \[0, 1, 2, 3\] score every key"):
        score_offset_share(flat, range(15, 100))
    with pytest.raises(ValueError, match="window must be an int >= 2, got 1"):
        score_offset_share(flat, range(15, 100), window=1)


@pytest.mark.claim("6.8")
def test_x_plus_p_far_start_accuracy_is_highest_with_starts_drawn_from_0_to_1000():
    """Row 6.8's second half, the whole model far away (X + P, base 10000, d = 32, 200 steps,
    three seeds): the mean accuracy over 20 unseen starts in 2000-19100 is highest for starts
    drawn from 0-1000, and trained on positions 0-15 no better than without positions. It is not
    evidence about attention (the values and the read-out meet untrained rows of P too; the
    score's own tests are above), and it does not rise with the number of positions (80
    spread positions score below 0-79). No positions: 0.33. Positions 0-15: 0.30-0.33, no
    better, and every head's weight on the previous token falls from more than 0.4 at start 0 to
    less than 0.3. 32 positions: 0.36-0.44 (0-31), 0.43-0.48 (0-15 and 1000-1015); 64 (0-63,
    length 64): 0.46-0.56; 80: 0.58-0.67 (0-79), 0.48-0.52 (five windows spread over 0-1015);
    starts drawn from 0-1000 (at most 200 of them in 200 batches, within 0-1015): 0.77-0.82, more
    than 0.05 above every other regime of its seed, and more than 0.2 above the two that span
    0-1015 with few positions. Its heads keep more than 0.35 of their weight on the previous
    token far away and move by less than 0.1 from start 0, but one query's weight moves by up to
    0.25-0.34; the 0-79 model's heads pass the same two bounds, so the heads do not tell the two
    apart, only the far-start accuracy does.

    Margins, for the seeds tested (0-2; the bounds are not claimed for others): positions
    0-15 score at most 0.003 above no positions (bound 0.05); the widest beats the next best by
    at least 0.11 (bound 0.05) and the spread ones by at least 0.25 (bound 0.2); the narrow
    heads fall from at least 0.41 to at most 0.24; the 0-79 heads move by 0.04-0.09 (outside
    review 6c; bound 0.1, close). The ranges quoted are checked within 0.02, since accuracies
    differ in the last digit between CPUs."""
    far = {name: [far_start_means(name, seed)[0] for seed in range(3)] for name in REGIMES}
    assert spread(far["no positions"]) == pytest.approx((0.33, 0.33), abs=0.02)
    assert spread(far["start 0, length 16"]) == pytest.approx((0.30, 0.33), abs=0.02)
    assert spread(far["starts 0..16, length 16"]) == pytest.approx((0.36, 0.44), abs=0.02)
    assert spread(far["starts 0 or 1000"]) == pytest.approx((0.43, 0.48), abs=0.02)
    assert spread(far["start 0, length 64"]) == pytest.approx((0.46, 0.56), abs=0.02)
    assert spread(far["starts 0..64, length 16"]) == pytest.approx((0.58, 0.67), abs=0.02)
    assert spread(far["starts 0, 250, .., 1000"]) == pytest.approx((0.48, 0.52), abs=0.02)
    assert spread(far["starts 0..1000, length 16"]) == pytest.approx((0.77, 0.82), abs=0.02)
    query_changes = []
    for seed in range(3):
        at = {name: far[name][seed] for name in REGIMES}
        assert at["start 0, length 16"] < at["no positions"] + 0.05, at
        widest = at.pop("starts 0..1000, length 16")
        assert all(widest > other + 0.05 for other in at.values()), (widest, at)
        assert widest > max(at["starts 0 or 1000"], at["starts 0, 250, .., 1000"]) + 0.2, at
        from_0 = trained_in_regime("start 0, length 16", seed)  # solved where trained, lost far
        assert accuracy_at_start(from_0, 0) > 0.95
        assert (weights_on_previous_token(from_0, 0).mean(dim=1) > 0.4).all()
        assert (far_start_means("start 0, length 16", seed)[1].mean(dim=1) < 0.3).all()
        at_0 = weights_on_previous_token(trained_in_regime("starts 0..1000, length 16", seed), 0)
        at_far = far_start_means("starts 0..1000, length 16", seed)[1]
        assert (at_far.mean(dim=1) > 0.35).all(), at_far
        assert ((at_0.mean(dim=1) - at_far.mean(dim=1)).abs() < 0.1).all()
        query_changes.append((at_0 - at_far).abs().max().item())
        # the 0-79 model passes the same head bounds: they do not separate it from 0-1015
        at_0 = weights_on_previous_token(trained_in_regime("starts 0..64, length 16", seed), 0)
        at_far = far_start_means("starts 0..64, length 16", seed)[1]
        assert (at_far.mean(dim=1) > 0.35).all(), at_far
        assert ((at_0.mean(dim=1) - at_far.mean(dim=1)).abs() < 0.1).all(), (at_0, at_far)
    assert spread(query_changes) == pytest.approx((0.25, 0.34), abs=0.02), query_changes


def test_start_places_the_tokens_at_positions_start_on():
    """model(tokens, start) is the model on positions start..start+n-1: the sinusoidal rows and
    the learned rows from start, RoPE's rotations from start (which its scores do not see);
    none and ALiBi do not depend on start. Checked against the layers called by hand."""
    torch.manual_seed(0)
    tokens = torch.randint(16, (2, 6))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    for encoding in mha.tasks.position_task.ENCODINGS:
        model = PositionToyModel(encoding, 16, max_positions=64).double()
        x = model.embed(tokens)
        if encoding == "sinusoidal":
            x = x + mha.sinusoidal_encoding(50, 32, dtype=torch.float64)[44:]
        if encoding == "learned":
            x = x + model.positions.weight[44:50]
        if encoding == "alibi":
            out, _ = model.attn(x, mask=mha.alibi_bias(4, 6, dtype=torch.float64)[None])
        elif encoding == "rope":
            out, _ = model.attn(x, positions=torch.arange(44, 50), mask=causal)
        else:
            out, _ = model.attn(x, mask=causal)
        with torch.no_grad():
            torch.testing.assert_close(model(tokens, 44), model.readout(x + out))
            if encoding in ("none", "alibi", "rope"):  # they see offsets only
                torch.testing.assert_close(model(tokens, 44), model(tokens))
    learned = PositionToyModel("learned", 16, max_positions=10)
    with pytest.raises(ValueError, match="10 positions, got a sequence of 6 starting at 5"):
        learned(tokens, 5)
    with pytest.raises(ValueError, match="start must be an int >= 0, got -1"):
        learned(tokens, -1)


@pytest.mark.claim("6.8")
@pytest.mark.parametrize("seed", range(3))
def test_which_encodings_solve_the_task_and_which_extrapolate(seed):
    """The chapter's findings, trained as in the notebook (length 16, 200 steps, one thread:
    tiny matrices gain nothing from more, and lose much on a busy machine), for three seeds:
    X + P (sinusoidal, learned) solves length 16 and does not extrapolate; RoPE stays perfect
    to position 31; ALiBi is weakest at 16 and loses least of those with positions; none beats the
    absolute encodings beyond the training length."""
    acc, by_pos = {}, {}
    for encoding in mha.tasks.position_task.ENCODINGS:
        model = trained(encoding, seed)
        acc[encoding] = {n: previous_token_accuracy(model, n) for n in (16, 64)}
        by_pos[encoding] = accuracy_by_position(model, 64)
    assert acc["none"][16] < 0.5  # content alone cannot find the previous token
    for encoding in ("sinusoidal", "learned", "rope"):
        assert acc[encoding][16] > 0.95
    for encoding in ("sinusoidal", "learned"):  # absolute positions do not extrapolate
        assert acc[encoding][64] < 0.5
        assert by_pos[encoding][15:].mean() < 0.5
    assert acc["rope"][64] > acc["sinusoidal"][64] + 0.1
    assert by_pos["rope"][:31].min() > 0.95 and by_pos["rope"][40:].mean() < 0.15
    assert acc["alibi"][16] < min(acc[e][16] for e in ("sinusoidal", "learned", "rope"))
    drop = {e: acc[e][16] - acc[e][64] for e in acc}
    # ALiBi degrades the least of the encodings with positions
    assert drop["alibi"] < min(drop[e] for e in ("sinusoidal", "learned", "rope"))
    # beyond the training length, no positions beats absolute ones
    absolute = max(by_pos[e][16:].mean() for e in ("sinusoidal", "learned"))
    assert by_pos["none"][16:].mean() > absolute


@pytest.mark.claim("6.4")
@pytest.mark.parametrize("vocab_size, position", [(2, 1), (2, 4), (3, 3), (4, 2), (4, 4)])
def test_no_order_blind_rule_beats_guessing_the_most_frequent_earlier_token(vocab_size, position):
    """Row 6.4: at position i a causal layer without positions sees its own token and the
    multiset of the i earlier ones. Over every sequence t_0..t_i (enumerated), the best rule on
    that view picks, for each view, the target seen most often with it; its accuracy equals
    order_blind_accuracy, and its guess is always a most frequent earlier token."""
    import itertools
    from collections import Counter, defaultdict

    targets_by_view = defaultdict(Counter)
    for seq in itertools.product(range(vocab_size), repeat=position + 1):
        view = (tuple(sorted(seq[:position])), seq[position])
        targets_by_view[view][seq[position - 1]] += 1
    best = sum(max(c.values()) for c in targets_by_view.values()) / vocab_size ** (position + 1)
    assert best == pytest.approx(order_blind_accuracy(position, vocab_size))
    for (earlier, _), counts in targets_by_view.items():
        most = max(Counter(earlier).values())
        best_guesses = {v for v, c in counts.items() if c == max(counts.values())}
        assert best_guesses == {v for v, c in Counter(earlier).items() if c == most}


@pytest.mark.claim("6.4")
@pytest.mark.parametrize("seed", range(3))
def test_the_model_without_positions_reaches_the_best_order_blind_rule(seed):
    """Trained as in the notebook, the model without positions is within 0.1 of the best
    order-blind accuracy at each position 1..15 (256 test sequences: a standard error of about
    0.03), so it does no better than guessing the most frequent earlier token, and no worse."""
    by_position = accuracy_by_position(trained("none", seed), 16)
    best_blind = torch.tensor([order_blind_accuracy(i, 16) for i in range(1, 16)])
    assert (by_position - best_blind).abs().max() < 0.1


@pytest.mark.claim("6.4")
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), cut=st.integers(2, 11))
def test_a_causal_model_without_positions_is_blind_to_the_order_of_earlier_tokens(seed, cut):
    """The causal version of the chapter's lemma: the output at position i >= cut does not
    change when the tokens before cut are shuffled (it sees them as a multiset)."""
    torch.manual_seed(seed)
    model = PositionToyModel("none", 16).double()
    tokens = torch.randint(16, (3, 12))
    shuffled = tokens.clone()
    shuffled[:, :cut] = tokens[:, torch.randperm(cut)]
    with torch.no_grad():
        torch.testing.assert_close(model(shuffled)[:, cut:], model(tokens)[:, cut:])


def test_order_blind_accuracy_is_the_expected_largest_count_over_i():
    """Exact values against the formula at small i and against a simulation (numpy)."""
    assert order_blind_accuracy(1, 16) == 1.0
    assert order_blind_accuracy(2, 16) == pytest.approx(17 / 32)  # (1 + 1/16) / 2
    assert order_blind_accuracy(3, 2) == pytest.approx((2 * 3 / 4 + 3 * 1 / 4) / 3)
    rng = np.random.default_rng(0)
    for i in (3, 7, 15):
        draws = rng.integers(0, 16, size=(200_000, i))
        largest = np.stack([(draws == v).sum(1) for v in range(16)]).max(0)
        assert order_blind_accuracy(i, 16) == pytest.approx(largest.mean() / i, abs=3e-3)
    with pytest.raises(ValueError, match="position must be a positive int, got 0"):
        order_blind_accuracy(0, 16)


def test_a_diverged_training_is_refused_naming_lr():
    """lr=1e6 made every parameter NaN within a few steps, and the NaN model then reported a
    plausible accuracy (0.07): the loop now checks the loss at every step (training_guard).
    The message names the model the function built (its caller passed none: tester 41 read
    "model" as an argument it never gave)."""
    with pytest.raises(ValueError, match=r"the 'none' position model.*training diverged "
                                         r"\(try a smaller lr than 1000000"):
        position_task.train_position_model("none", steps=20, lr=1e6)


def test_previous_token_accuracy_refuses_length_1():
    model = position_task.PositionToyModel("none", 16)
    with pytest.raises(ValueError, match="length must be at least 2, got 1.*no scored position"):
        position_task.previous_token_accuracy(model, 1)
    assert 0.0 <= position_task.previous_token_accuracy(model, 2) <= 1.0


def test_score_offset_share_refuses_a_single_distinct_query():
    """One query (or one repeated) left nothing around each offset's mean: 1.0 for any model."""
    torch.manual_seed(0)
    model = position_task.PositionToyModel("sinusoidal", 16)
    for queries in ([15], [15, 15, 15]):
        with pytest.raises(ValueError, match="at least two distinct positions"):
            position_task.score_offset_share(model, queries)
    share = position_task.score_offset_share(model, [15, 22])
    assert bool((share < 1).all())


def test_learned_table_too_short_for_max_start_is_refused_up_front():
    with pytest.raises(ValueError, match=r"max_start=300 and length=16 need positions up to "
                                         r"315, but the learned table has max_positions=256"):
        position_task.train_position_model("learned", steps=200, max_start=300)
    # the last start actually drawn counts: starts 0 and 240 fit a table of 256
    position_task.train_position_model("learned", steps=1, batch=2, max_start=250,
                                       start_step=240)


def test_previous_token_accuracy_measures_in_eval_mode_and_gives_the_mode_back():
    """A model left in training mode kept its dropout on: another accuracy at every call."""
    torch.manual_seed(0)
    model = PositionToyModel("sinusoidal", 5)
    model.attn.dropout = 0.9  # what a model trained with dropout would carry
    got = [previous_token_accuracy(model, 8, batch=16) for _ in range(3)]
    assert model.training and model.attn.training  # the mode it had, back
    expected = previous_token_accuracy(model.eval(), 8, batch=16)
    assert got == [expected] * 3
