"""Chapter 6: the previous-token task, and what each position encoding makes of it."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
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
    """The notebook's recipe (200 steps, batch 32, one thread) in one of REGIMES."""
    if name in ("no positions", "start 0, length 16"):
        return trained("none" if name == "no positions" else "sinusoidal", seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_position_model("sinusoidal", steps=200, batch=32, seed=seed, **REGIMES[name])
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


#: Queries 15, 25, .., 1015: within the span the widest regime covers, each with 16 keys.
SHARE_QUERIES = range(15, 1016, 10)


@functools.cache
def offset_shares(name, seed):
    """score_offset_share of the regime's model at SHARE_QUERIES, (heads,)."""
    return score_offset_share(trained_in_regime(name, seed), SHARE_QUERIES)


def share_spread(name):
    """(smallest, largest) offset share over the 4 heads of the three seeds' models."""
    return spread(torch.cat([offset_shares(name, seed) for seed in range(3)]).tolist())


@pytest.mark.claim("6.8")
def test_x_plus_p_score_depends_on_the_offset_when_training_draws_many_starts():
    """Row 6.8's second half, "easily learn to attend by relative positions", judged on the
    score itself (X + P, base 10000, d = 32, 200 steps, three seeds): the share of each head's
    position score (mean token at queries 15, 25, .., 1015 against its 16 nearest keys, centred
    per query) that the offset alone explains. Trained from position 0 only: 0.01-0.07 in every
    head, a score fitted to positions. Trained with a start drawn per batch from 0-64 or 0-1000:
    0.59-0.81 and 0.65-0.91, mostly by offset. Fewer starts fall between, whatever their span or
    the sequences' length: 0.02-0.55 for starts 0-16 (17 starts), 0 and 1000, 0, 250, .., 1000,
    or start 0 with length 64 (which shows offset 1 at 63 places, near the 79 of starts 0-64).
    So 200 steps give a score mostly by offset when training places the sequences at many
    starts (drawn from 0-64 or 0-1000), not with 17 starts or fewer, nor with one longer run.
    score_offset_share itself is checked against the forward pass in the next test.

    Margins, for the seeds tested (0-2): the many-start regimes' lowest head (0.59) lies 0.04
    above the highest of the others (0.55); the ranges are checked within 0.02, since trained
    weights differ in the last digits between CPUs."""
    assert share_spread("start 0, length 16") == pytest.approx((0.01, 0.07), abs=0.02)
    assert share_spread("starts 0..64, length 16") == pytest.approx((0.59, 0.81), abs=0.02)
    assert share_spread("starts 0..1000, length 16") == pytest.approx((0.65, 0.91), abs=0.02)
    fewer = ["starts 0..16, length 16", "start 0, length 64", "starts 0 or 1000",
             "starts 0, 250, .., 1000"]
    low, high = spread([v for name in fewer for v in share_spread(name)])
    assert (low, high) == pytest.approx((0.02, 0.55), abs=0.02)
    many = min(share_spread(name)[0]
               for name in ("starts 0..64, length 16", "starts 0..1000, length 16"))
    assert many > high and many > 0.5 > share_spread("start 0, length 16")[1] + 0.4


def test_score_offset_share_matches_the_scores_of_the_forward_pass():
    """score_offset_share computes the scores from the projections by hand; here the same share
    comes from the model's own attention weights: with every token the mean embedding, the log
    weights equal the scores up to a constant per query, which the share removes. Bad input is
    refused by name."""
    model = trained_in_regime("starts 0..64, length 16", 0)
    queries = range(15, 400, 40)
    mean_token = model.embed.weight.mean(dim=0)
    rows = []
    for i in queries:  # the query at i and its keys i-15..i, as the model sees them
        x = (mean_token + mha.sinusoidal_encoding(i + 1, 32)[i - 15:])[None]  # (1, 16, 32)
        causal = torch.ones(16, 16, dtype=torch.bool).tril()
        with torch.no_grad():
            _, weights = model.attn(x, mask=causal)  # (1, heads, 16, 16)
        log_w = weights[0, :, -1].log()  # (heads, 16): the last query, keys at offsets 15..0
        rows.append(log_w - log_w.mean(dim=-1, keepdim=True))
    scores = torch.stack(rows)  # (queries, heads, 16)
    within = ((scores - scores.mean(dim=0)) ** 2).sum(dim=(0, 2))
    expected = 1 - within / (scores**2).sum(dim=(0, 2))
    torch.testing.assert_close(score_offset_share(model, queries).float(), expected,
                               atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="model must be a PositionToyModel with the 'sinusoidal'"):
        score_offset_share(trained("none", 0), queries)
    with pytest.raises(ValueError, match="queries must be an int >= 15, got 3"):
        score_offset_share(model, [3])
    with pytest.raises(ValueError, match="queries must hold at least one item"):
        score_offset_share(model, [])


@pytest.mark.claim("6.8")
def test_x_plus_p_far_start_accuracy_is_highest_with_starts_drawn_from_0_to_1000():
    """Row 6.8's second half, the whole model far away (X + P, base 10000, d = 32, 200 steps,
    three seeds): the mean accuracy over 20 unseen starts in 2000-19100 is highest for starts
    drawn from 0-1000, and trained on positions 0-15 no better than without positions. It is not
    evidence about attention (the values and the read-out meet untrained rows of P too; the
    score's own test is the one above), and it does not rise with the number of positions (80
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
