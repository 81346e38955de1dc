"""The toy translator: the task, the encoder-decoder, and seed claim 7.5 (pruning by kind)."""

import copy

import pytest
import torch

import mha
from mha.models.seq2seq import (
    KINDS,
    agreement_pruning_curves,
    agreement_translation_batch,
    kind_importance,
    kind_pruning_curves,
    translate,
)
from mha.models.trained_models import AGREEMENT_RECIPE, TRANSLATOR_RECIPE


def test_translation_follows_the_rule_word_by_word():
    dictionary = mha.translation_dictionary(6, seed=3)
    source = torch.tensor([[4, 1, 5, 2, 2, 0, 3]])
    n = source.shape[1]
    x = [0] + source[0].tolist()  # 1-based: x[1..n], x[0] = 0
    y = {-1: 0, 0: 0}
    for i in range(1, n + 1):
        bit = (x[n - i] % 2) ^ (y[i - 2] % 2)
        y[i] = 2 * int(dictionary[x[n + 1 - i]]) + bit
    assert translate(source, dictionary)[0].tolist() == [y[i] for i in range(1, n + 1)]


def test_batches_are_shifted_for_teacher_forcing():
    dictionary = mha.translation_dictionary(8)
    source, target_in, target_out = mha.translation_batch(5, 6, dictionary,
                                                          torch.Generator().manual_seed(0))
    assert torch.equal(target_out, translate(source, dictionary))
    assert (target_in[:, 0] == 16).all() and torch.equal(target_in[:, 1:], target_out[:, :-1])


def test_decoder_cannot_see_future_target_words():
    torch.manual_seed(0)
    model = mha.build_translator().double().eval()
    dictionary = mha.translation_dictionary(16)
    source, target_in, _ = mha.translation_batch(3, 8, dictionary, torch.Generator())
    changed = target_in.clone()
    changed[:, 5:] = 0
    torch.testing.assert_close(model(source, target_in)[:, :5], model(source, changed)[:, :5],
                               rtol=0, atol=1e-12)


def test_zero_gates_on_a_kind_remove_it():
    torch.manual_seed(0)
    model = mha.build_translator().double().eval()
    dictionary = mha.translation_dictionary(16)
    source, target_in, _ = mha.translation_batch(3, 8, dictionary, torch.Generator())
    gates = torch.ones(3, 2, 4, dtype=torch.float64)
    gates[2] = 0.0  # no cross-attention: the output cannot depend on the source
    other = (source + 1) % 16
    torch.testing.assert_close(model(source, target_in, gates), model(other, target_in, gates),
                               rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="head_mask must have shape"):
        model(source, target_in, torch.ones(2, 4))


@pytest.fixture(scope="module")
def seed_curves():
    """The chapter's experiment on every shipped translator: importance from two batches of
    250 sentences (generator seed 4), curves on 250 test sentences (seed 3), by part."""
    torch.set_num_threads(1)
    r = TRANSLATOR_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    gen = torch.Generator().manual_seed(4)
    batches = [mha.translation_batch(250, r["seq_len"], dictionary, gen) for _ in range(2)]
    test = mha.translation_batch(250, r["seq_len"], dictionary, torch.Generator().manual_seed(3))
    curves = {}
    for seed in r["init_seeds"]:
        model = mha.load_translator(seed)
        curves[seed] = kind_pruning_curves(model, kind_importance(model, batches), *test,
                                           by_part=True)
    return curves


def first_drop(curve):
    return next((k for k, a in enumerate(curve) if a < 0.99), len(curve))


def kept_with_one_head_left(curve, chance):
    """The share of what a part carries above chance that one head left still keeps."""
    return (curve[-2] - chance) / (curve[0] - chance)


@pytest.mark.claim("7.5")
def test_kinds_of_attention_compared_by_token_accuracy_and_by_what_each_carries(seed_curves):
    """Seed 002 after Michel et al.: the encoder-decoder attention depends more on having many
    heads than the self-attentions. On the six shipped toy translators (8 heads of each kind,
    each kind pruned alone, least important first), in token accuracy it costs the most when
    few heads remain: with one head left it is the worst kind and the only one that loses words
    (word accuracy 0.255-0.484, the self-attentions 1.000), and 6 of its 8 heads removed cost
    more than 0.2, in every seed. But only it carries the words: measured against what each kind
    carries (the share above chance kept with one head left: the encoder's self-attention of its
    bit, the encoder-decoder attention of the words), the encoder's self-attention is at least
    as dependent (it keeps less in every seed but seed 3), and 6 of its 8 heads removed also
    cost more than 0.2 in 4 of 6 seeds, leaving it below the encoder-decoder attention in 3 of
    6: this toy cannot separate the kinds (the agreement task below can)."""
    enc, dec, cross = KINDS
    assert sorted(seed_curves) == TRANSLATOR_RECIPE["init_seeds"] and len(seed_curves) == 6
    for seed, c in seed_curves.items():
        token = {name: c[name]["token"] for name in KINDS}
        assert token[enc][0] == token[dec][0] == token[cross][0] > 0.99, seed
        assert token[cross][-2] < min(token[enc][-2], token[dec][-2]), seed
        assert c[cross]["word"][-2] < 0.5 and c[enc]["word"][-2] == c[dec]["word"][-2] == 1, seed
        assert token[cross][6] < token[cross][0] - 0.2, seed
        # what the self-attentions carry: the bit; the words survive with none of them left
        assert f"{min(c[enc]['word'][-1], c[dec]['word'][-1]):.3f}" == "1.000", seed
    one_left = [c[cross]["word"][-2] for c in seed_curves.values()]
    assert f"{min(one_left):.3f}-{max(one_left):.3f}" == "0.255-0.484"
    # with none left: the bit without the encoder's self-attention, the words without the cross
    assert spread([c[enc]["bit"][-1] for c in seed_curves.values()]) == "0.520-0.571"
    assert spread([c[cross]["word"][-1] for c in seed_curves.values()]) == "0.053-0.082"
    enc_kept = [kept_with_one_head_left(c[enc]["bit"], 1 / 2) for c in seed_curves.values()]
    cross_kept = [kept_with_one_head_left(c[cross]["word"], 1 / 16) for c in seed_curves.values()]
    assert f"{min(enc_kept):.2f}-{max(enc_kept):.2f}" == "0.03-0.34"
    assert f"{min(cross_kept):.2f}-{max(cross_kept):.2f}" == "0.20-0.45"
    more = [s for s, e, x in zip(seed_curves, enc_kept, cross_kept, strict=True) if e >= x]
    assert more == [3]  # the encoder's self-attention keeps less in every seed but seed 3
    enc_drops = sum(c[enc]["token"][6] < c[enc]["token"][0] - 0.2 for c in seed_curves.values())
    below = sum(c[enc]["token"][6] < c[cross]["token"][6] for c in seed_curves.values())
    first = sum(first_drop(c[enc]["token"]) < first_drop(c[cross]["token"])
                for c in seed_curves.values())
    assert (enc_drops, below, first) == (4, 3, 4)


@pytest.mark.claim("7.5")
def test_with_no_encoder_decoder_head_left_the_decoder_cannot_see_the_source(seed_curves):
    """Why "with none left only the encoder-decoder attention collapses" is no evidence about
    heads: in every shipped translator, with its cross-attention gated off, replacing every
    source word leaves the logits exactly as they were, so the words are lost whatever the
    heads (word accuracy near chance, 1/16); the self-attentions keep them."""
    enc, dec, cross = KINDS
    r = TRANSLATOR_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    source, target_in, _ = mha.translation_batch(50, r["seq_len"], dictionary,
                                                 torch.Generator().manual_seed(3))
    gates = torch.ones(3, r["num_layers"], r["num_heads"])
    gates[KINDS.index(cross)] = 0.0
    for seed, c in seed_curves.items():
        model = mha.load_translator(seed)
        with torch.no_grad():
            change = model(source, target_in, gates) - model((source + 1) % r["vocab_size"],
                                                             target_in, gates)
        assert change.abs().max().item() == 0.0, seed
        assert c[cross]["word"][-1] < 0.1 < 0.99 < min(c[enc]["word"][-1], c[dec]["word"][-1])


def test_agreement_translation_follows_its_rule_word_by_word():
    """y_i = 4 T[w_i] + 2 s_i + a_i, written out from the definition with 1-based loops."""
    dictionary = mha.translation_dictionary(6, seed=3)
    source, target_in, target_out = mha.agreement_translation_batch(
        4, 7, dictionary, torch.Generator().manual_seed(5))
    n = source.shape[1]
    for row in range(source.shape[0]):
        x = [0] + source[row].tolist()  # 1-based: x[1..n], x[0] = 0 (no left neighbour)
        y = target_out[row].tolist()
        free = [y[0] % 2, y[1] % 2]
        for i in range(1, n + 1):  # the i-th target word, 1-based
            agreement = free[(i - 1) % 2]  # the first two are free, then two back
            expected = 4 * int(dictionary[x[n + 1 - i]]) + 2 * (x[n - i] % 2) + agreement
            assert y[i - 1] == expected, (row, i)
    assert (target_in[:, 0] == 24).all() and torch.equal(target_in[:, 1:], target_out[:, :-1])


def test_agreement_tasks_free_bits_are_random_and_absent_from_the_source():
    dictionary = mha.translation_dictionary(16)
    source, _, target_out = mha.agreement_translation_batch(
        4000, 8, dictionary, torch.Generator().manual_seed(0))
    free = target_out[:, :2] % 2
    assert abs(free.double().mean().item() - 0.5) < 0.03
    # independent of each other and of every source parity: no route but the target's own words
    for column in [free[:, 1], *(source % 2).T]:
        assert abs((free[:, 0] == column).double().mean().item() - 0.5) < 0.03
    # what the decoder reads gives away one bit of the next word: the previous target word's
    # sense is the parity of w_i (its left neighbour), so without the source a model can reach
    # 1/8 of the words, not only 1/16
    assert torch.equal(target_out[:, :-1] // 2 % 2, source.flip(1)[:, 1:] % 2)
    with pytest.raises(ValueError, match="seq_len"):
        mha.agreement_translation_batch(4, 2, dictionary, torch.Generator())


@pytest.fixture(scope="module")
def agreement():
    """Chapter 9's agreement experiment on every shipped translator of the task: its test
    sentences (250, generator seed 3), importance from two batches of 250 (seed 4), curves."""
    torch.set_num_threads(1)
    r = AGREEMENT_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    test = mha.agreement_translation_batch(250, r["seq_len"], dictionary,
                                           torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(4)
    batches = [mha.agreement_translation_batch(250, r["seq_len"], dictionary, gen)
               for _ in range(2)]
    nets = {seed: mha.load_agreement_translator(seed) for seed in r["init_seeds"]}
    curves = {seed: agreement_pruning_curves(net, kind_importance(net, batches), *test)
              for seed, net in nets.items()}
    return nets, test, curves


def part_accuracies(net, source, target_in, target_out, gates):
    """Word, sense and agreement accuracy on positions 2..n-1, straight from the definition."""
    with torch.no_grad():
        predicted = net(source, target_in, gates).argmax(-1)[:, 2:]
    target = target_out[:, 2:]
    return {"word": (predicted // 4 == target // 4).double().mean().item(),
            "sense": ((predicted // 2) % 2 == (target // 2) % 2).double().mean().item(),
            "agreement": (predicted % 2 == target % 2).double().mean().item()}


def spread(values, digits=3):
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


@pytest.mark.claim("7.5")
def test_in_the_agreement_task_each_kind_of_attention_is_needed_for_its_part(agreement):
    """In the agreement task each kind of attention carries a part: removing all of a kind's
    heads loses its part (agreement 0.476-0.528, word 0.077-0.115 with chance 1/16, a little
    above since the previous target word's sense bit is the parity of the current word; sense
    0.571-0.848: near chance in five seeds, seed 3 fetches part of it through the
    cross-attention) and keeps the parts of the other kinds; replacing is the control: with no
    decoder self-attention the earlier target words, with no encoder-decoder attention the
    source, move no logit at all."""
    nets, (source, target_in, target_out), _ = agreement
    r = AGREEMENT_RECIPE
    shape = (3, r["num_layers"], r["num_heads"])
    removed = {kind: {} for kind in KINDS}
    for seed, net in nets.items():
        assert set(part_accuracies(net, source, target_in, target_out,
                                   torch.ones(shape)).values()) == {1.0}, seed
        for k, kind in enumerate(KINDS):
            gates = torch.ones(shape)
            gates[k] = 0.0
            removed[kind][seed] = part_accuracies(net, source, target_in, target_out, gates)
    enc, dec, cross = KINDS
    kept = {enc: ("word", "agreement"), dec: ("word", "sense"), cross: ("agreement",)}
    for kind, parts in kept.items():
        assert all(removed[kind][s][p] > 0.99 for s in nets for p in parts), kind
    agreement_lost = [removed[dec][s]["agreement"] for s in nets]
    word_lost = [removed[cross][s]["word"] for s in nets]
    sense_lost = [removed[enc][s]["sense"] for s in nets]
    assert (spread(agreement_lost), spread(word_lost), spread(sense_lost)) == (
        "0.476-0.528", "0.077-0.115", "0.571-0.848")
    assert [s for s in nets if removed[enc][s]["sense"] > 0.6] == [3]
    assert max(word_lost) < 1 / 8  # the most the sense bit of the previous word gives away
    assert all(removed[cross][s]["sense"] < 0.6 for s in nets)  # it carries the sense on too

    no_dec, no_cross = torch.ones(shape), torch.ones(shape)
    no_dec[KINDS.index(dec)], no_cross[KINDS.index(cross)] = 0.0, 0.0
    noise = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for seed, net in nets.items():
            logits = net(source, target_in, no_dec)
            for i in range(1, r["seq_len"]):
                other = target_in.clone()
                other[:, :i] = torch.randint(4 * r["vocab_size"] + 1, (len(other), i),
                                             generator=noise)
                assert torch.equal(logits[:, i], net(source, other, no_dec)[:, i]), (seed, i)
            other_source = (source + 1) % r["vocab_size"]
            assert torch.equal(net(source, target_in, no_cross),
                               net(other_source, target_in, no_cross)), seed


def share_kept(curve):
    """The share of what a kind carries still there: 1 with all its heads, 0 with none."""
    return [(a - curve[-1]) / (curve[0] - curve[-1]) for a in curve]


@pytest.mark.claim("7.5")
def test_in_the_agreement_task_the_encoder_decoder_attention_keeps_the_least_with_few_heads_left(
        agreement):
    """Seed 002 after Michel et al., reading (b): the encoder-decoder attention depends more on
    having many heads. On the agreement task, each kind pruned alone by importance and measured
    by the share kept of what it carries, the encoder-decoder attention (which carries the most)
    keeps the least with two of its eight heads left in 5 of 6 seeds (0.56-0.68, while the
    encoder's self-attention keeps 1.00 in 5 of 6) and, averaged over 1-7 heads removed, in 4
    of 6. Which kind slips first depends on the cut-off: below 0.99 of its part it is first in 6
    of 6, below 0.98 and 0.95 in 5, below 0.90 in 3 (tied in the rest), below 0.80 and 0.70 in 5
    and later than a self-attention in one. With one head left the decoder's self-attention
    keeps the least in 4 of 6, at about chance."""
    _, _, curves = agreement
    enc, dec, cross = KINDS
    kept = {s: {kind: share_kept(c[kind]["token"]) for kind in KINDS} for s, c in curves.items()}

    def first_drop(curve, cut=0.99):
        return next(k for k, a in enumerate(curve) if a < cut)

    def least(k, kind):
        return sum(all(kept[s][kind][k] < kept[s][o][k] for o in KINDS if o != kind)
                   for s in kept)

    first = sum(first_drop(kept[s][cross]) < min(first_drop(kept[s][enc]),
                                                 first_drop(kept[s][dec])) for s in kept)
    assert (first, least(6, cross), least(7, dec)) == (6, 5, 4)
    by_cut = []  # (cut-off, seeds where it is first, seeds where it ties a self-attention)
    for cut in (0.99, 0.98, 0.95, 0.90, 0.80, 0.70):
        steps = [(first_drop(kept[s][cross], cut),
                  min(first_drop(kept[s][o], cut) for o in (enc, dec))) for s in kept]
        by_cut.append((cut, sum(c < o for c, o in steps), sum(c == o for c, o in steps)))
    assert by_cut == [(0.99, 6, 0), (0.98, 5, 1), (0.95, 5, 1), (0.90, 3, 3), (0.80, 5, 0),
                      (0.70, 5, 0)]  # at 0.80 and 0.70 it is later than a self-attention in one
    # over the whole curve (1-7 heads removed) it keeps the least of its part in 4 of 6
    assert sum(sum(kept[s][cross][1:-1]) < min(sum(kept[s][o][1:-1]) for o in (enc, dec))
               for s in kept) == 4
    assert spread([kept[s][cross][6] for s in kept], 2) == "0.56-0.68"
    assert sum(f"{kept[s][enc][6]:.2f}" == "1.00" for s in kept) == 5
    collapsed = [kept[s][dec][7] for s in kept if kept[s][dec][7] < 0.5]
    assert len(collapsed) == 4 and max(abs(x) for x in collapsed) < 0.05  # about chance
    assert least(7, cross) == 2  # with one head left the order changes
    # how far down the order it holds (chapter 9 prints it, review 43b F5): all kinds keep
    # nearly everything with 7 or 6 left, then it keeps the least from 5 down to 2 left, not at 1
    assert [least(k, cross) for k in range(1, 8)] == [0, 1, 5, 6, 5, 5, 2]


def agreement_share_kept(net, test, ends, kind, gates):
    """The share of what ``kind`` carries that ``net`` keeps with ``gates``: token accuracy on
    positions 2..n-1 of the sentences ``test``, against ``ends`` (with all, with none of the
    kind's heads), as in share_kept."""
    source, target_in, target_out = test
    with torch.no_grad():
        predicted = net(source, target_in, gates).argmax(-1)[:, 2:]
    accuracy = (predicted == target_out[:, 2:]).double().mean().item()
    full, none = ends[kind]
    return (accuracy - none) / (full - none)


def ends_of(curves):
    """seed -> kind -> (token accuracy with all the kind's heads, with none), from the curves."""
    return {s: {kind: (c[kind]["token"][0], c[kind]["token"][-1]) for kind in KINDS}
            for s, c in curves.items()}


@pytest.fixture(scope="module")
def single_head_shares(agreement):
    """(seed, kind) -> the share kept of what the kind carries with each one of its 8 heads
    kept alone (the kind's other heads removed, the other kinds intact)."""
    nets, test, curves = agreement
    r = AGREEMENT_RECIPE
    ends = ends_of(curves)
    shares = {}
    for seed, net in nets.items():
        for k, kind in enumerate(KINDS):
            shares[seed, kind] = []
            for layer in range(r["num_layers"]):
                for head in range(r["num_heads"]):
                    gates = torch.ones(3, r["num_layers"], r["num_heads"])
                    gates[k] = 0.0
                    gates[k, layer, head] = 1.0
                    shares[seed, kind].append(
                        agreement_share_kept(net, test, ends[seed], kind, gates))
    return shares


@pytest.mark.claim("7.5")
def test_with_the_best_single_head_of_each_kind_kept_the_encoder_decoder_attention_keeps_least(
        agreement, single_head_shares):
    """The one-head fall of the decoder's self-attention is the importance order's: with each
    kind's best single head kept (each of its 8 tried alone, the kind's other heads removed) the
    shares kept are 0.89-1.00 (encoder), 0.85-1.00 (decoder), 0.35-0.49 (encoder-decoder), and
    the encoder-decoder attention keeps the least in 6 of 6 seeds."""
    nets = agreement[0]
    best = {key: max(shares) for key, shares in single_head_shares.items()}
    enc, dec, cross = KINDS
    assert [spread([best[s, kind] for s in nets], 2) for kind in KINDS] == [
        "0.89-1.00", "0.85-1.00", "0.35-0.49"]
    assert sum(best[s, cross] < min(best[s, enc], best[s, dec]) for s in nets) == 6


def seeds_where_least(kept):
    """kind -> the number of seeds in which it keeps the least share of the three; kept:
    seed -> kind -> share."""
    return {kind: sum(all(kept[s][kind] < kept[s][o] for o in KINDS if o != kind) for s in kept)
            for kind in KINDS}


@pytest.mark.claim("7.5")
def test_pruned_in_a_random_order_the_encoder_decoder_attention_does_not_keep_the_least(
        agreement, single_head_shares):
    """The claim's condition: the order. Pruned in a random order instead of by importance, the
    encoder-decoder attention is not the kind that keeps the least in most seeds. With one head
    left a random order leaves each head alike, so the expected share is the mean over the 8
    single heads: 0.14-0.26 (encoder), 0.20-0.35 (decoder), 0.17-0.29 (encoder-decoder), the
    least in 3, 1 and 2 of 6 seeds. With two heads left, averaged over 6 random orders per kind
    and seed (generator seed 0): the encoder-decoder attention keeps the least in 0 of 6 seeds, the
    encoder's self-attention in 5 and the decoder's in 1."""
    nets, test, curves = agreement
    r = AGREEMENT_RECIPE
    enc, dec, cross = KINDS
    mean_one = {s: {kind: sum(single_head_shares[s, kind]) / 8 for kind in KINDS} for s in nets}
    assert [spread([mean_one[s][kind] for s in nets], 2) for kind in KINDS] == [
        "0.14-0.26", "0.20-0.35", "0.17-0.29"]
    assert seeds_where_least(mean_one) == {enc: 3, dec: 1, cross: 2}

    ends = ends_of(curves)
    heads = [(layer, head) for layer in range(r["num_layers"]) for head in range(r["num_heads"])]
    orders = torch.Generator().manual_seed(0)
    mean_two = {}
    for seed, net in nets.items():
        mean_two[seed] = {}
        for k, kind in enumerate(KINDS):
            shares = []
            for _ in range(6):
                gates = torch.ones(3, r["num_layers"], r["num_heads"])
                for i in torch.randperm(len(heads), generator=orders)[:6].tolist():
                    gates[(k, *heads[i])] = 0.0  # the first 6 of a random order removed
                shares.append(agreement_share_kept(net, test, ends[seed], kind, gates))
            mean_two[seed][kind] = sum(shares) / len(shares)
    assert seeds_where_least(mean_two) == {enc: 5, dec: 1, cross: 0}


@pytest.mark.claim("7.5")
def test_over_other_importance_samples_the_encoder_decoder_attention_mostly_keeps_least(
        agreement):
    """The importance order's count "with 2 of 8 heads left the encoder-decoder attention keeps
    the least of its part" over other samples of the importance (two batches of 250 sentences
    each): with generator seeds 0, 1, 2, 3 and the course's 4 in 5, 5, 5, 6 and 5 of 6 seeds; a
    sample that reverses it exists: with seed 13 in 1 of 6, the decoder's self-attention in 5.
    (A review's run over seeds 0-29, not repeated here, found 5 or 6 of 6 in 23 of 30 samples,
    4 in 5, 3 in one, 1 only at 13.)"""
    nets, test, curves = agreement
    r = AGREEMENT_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    ends = ends_of(curves)
    enc, dec, cross = KINDS
    counts = {4: seeds_where_least({s: {kind: share_kept(c[kind]["token"])[6] for kind in KINDS}
                                    for s, c in curves.items()})}
    for sample in (0, 1, 2, 3, 13):
        gen = torch.Generator().manual_seed(sample)
        batches = [mha.agreement_translation_batch(250, r["seq_len"], dictionary, gen)
                   for _ in range(2)]
        kept = {}
        for seed, net in nets.items():
            importance = kind_importance(net, batches)
            kept[seed] = {}
            for k, kind in enumerate(KINDS):
                gates = torch.ones(3, r["num_layers"], r["num_heads"])
                for layer, head in mha.pruning_order(importance[k])[:6]:  # 2 of 8 left
                    gates[k, layer, head] = 0.0
                kept[seed][kind] = agreement_share_kept(net, test, ends[seed], kind, gates)
        counts[sample] = seeds_where_least(kept)
    assert {g: c[cross] for g, c in counts.items()} == {0: 5, 1: 5, 2: 5, 3: 6, 4: 5, 13: 1}
    assert counts[13][dec] == 5


def small_translator_and_batches():
    torch.manual_seed(0)
    model = mha.TinyTranslator(5, 11, 10, max_len=6, embed_dim=16, num_heads=2, num_layers=1)
    dictionary = mha.translation_dictionary(5)
    gen = torch.Generator().manual_seed(0)
    return model, [mha.translation_batch(4, 5, dictionary, gen) for _ in range(2)]


def test_kind_importance_sums_each_batch_mean_loss_gradient_then_normalises_layers():
    """What the docstring says, against autograd on the model's own loss, batch by batch."""
    model, batches = small_translator_and_batches()
    model = model.double()
    total = torch.zeros(3, 1, 2, dtype=torch.float64)
    for source, target_in, target_out in batches:
        gates = torch.ones(3, 1, 2, dtype=torch.float64, requires_grad=True)
        logits = model(source, target_in, gates)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_out.flatten())
        loss.backward()
        total += gates.grad.abs()
    expected = total / total.norm(dim=-1, keepdim=True)
    result = kind_importance(model, batches)
    assert result.dtype == torch.float64  # the gates follow the model's dtype
    torch.testing.assert_close(result, expected, rtol=1e-10, atol=0)


def test_kind_importance_of_a_bfloat16_model_sums_its_batches_in_float32():
    """The running sum over batches in bfloat16 stalled once it dwarfed a batch's gradient
    (0.013 off the float64 importances after 100 batches); summed in float32 and cast back
    it is within one bfloat16 step. The reference: the same rounded weights in float64."""
    model, batches = small_translator_and_batches()
    model, batches = model.to(torch.bfloat16), batches * 50
    got = kind_importance(model, batches)
    expected = kind_importance(copy.deepcopy(model).double(), batches)
    assert got.dtype == torch.bfloat16  # cast back to the model's dtype
    assert (got.double() - expected).abs().max() < torch.finfo(torch.bfloat16).eps


def test_kind_importance_and_curves_refuse_a_nan_model():
    model, batches = small_translator_and_batches()
    with torch.no_grad():
        model.readout.bias[0] = float("nan")
    with pytest.raises(ValueError, match="loss of model on batches.0. is nan"):
        kind_importance(model, batches)
    importance = torch.rand(3, 1, 2)
    # argmax counts NaN as the largest score: the accuracy would be the share of class 0
    for curves in (kind_pruning_curves, agreement_pruning_curves):
        with pytest.raises(ValueError, match="scores of model holds NaN"):
            curves(model, importance, *batches[0])


def test_kind_importance_and_curves_in_float64_agree_with_float32():
    model, batches = small_translator_and_batches()
    wide = copy.deepcopy(model).double()
    torch.testing.assert_close(kind_importance(wide, batches),
                               kind_importance(model, batches).double(), rtol=1e-4, atol=1e-6)
    importance = torch.rand(3, 1, 2, generator=torch.Generator().manual_seed(1))
    assert kind_pruning_curves(wide, importance, *batches[0]) == \
        kind_pruning_curves(model, importance, *batches[0])


@pytest.mark.parametrize("make, words", [
    (lambda b: [(b[0], b[1], b[2] + 50)], "target_out of batches.0. must lie in 0..9"),
    (lambda b: [(b[0], b[1], b[2][:, :3])], "target_out of batches.0. must have target_in's"),
    (lambda b: [(b[0], b[1], b[2].float())], "target_out of batches.0. must be an integer"),
    (lambda b: [(b[0], b[1])], "batches.0. must be a triple"),
])
def test_kind_importance_names_a_bad_batch(make, words):
    model, batches = small_translator_and_batches()
    with pytest.raises(ValueError, match=words):
        kind_importance(model, make(batches[0]))


def test_kind_pruning_curves_name_bad_targets_and_importance():
    model, batches = small_translator_and_batches()
    source, target_in, target_out = batches[0]
    with pytest.raises(ValueError, match="target_out must have target_in's shape"):
        kind_pruning_curves(model, torch.rand(3, 1, 2), source, target_in, target_out[:, :3])
    with pytest.raises(ValueError, match=r"importance must have shape \(3, 1, 2\)"):
        agreement_pruning_curves(model, torch.rand(3, 2), source, target_in, target_out)
    with pytest.raises(ValueError, match="importance holds NaN"):
        kind_pruning_curves(model, torch.full((3, 1, 2), float("nan")), *batches[0])


def test_a_translator_with_one_pruned_layer_says_so_and_gating_gives_its_outputs():
    model, batches = small_translator_and_batches()
    source, target_in, _ = batches[0]
    gates = torch.ones(3, 1, 2)
    gates[2, 0, 1] = 0.0  # cross-attention's head 1 gated off
    gated = model(source, target_in, gates)
    pruned = copy.deepcopy(model)
    pruned.decoder[0].cross_attn = mha.prune_heads(pruned.decoder[0].cross_attn, [1])
    with pytest.raises(ValueError, match=r"model.decoder\[0\].cross_attn has 1 heads but "
                                         r"TinyTranslator gates 2 per layer"):
        pruned(source, target_in)
    # what the message advises: the gated model computes what the pruned layer would
    memory = model.encoder_norm(model.encoder[0](model.source_embedding(source)
                                                 + model.source_positions[:5])[0])
    block, y = pruned.decoder[0], model.target_embedding(target_in) + model.target_positions[:5]
    y = y + block.self_attn(block.norm1(y), is_causal=True, need_weights=False)[0]
    y = y + block.cross_attn(block.norm2(y), memory, need_weights=False)[0]
    y = y + block.mlp(block.norm3(y))
    torch.testing.assert_close(model.readout(model.norm(y)), gated, rtol=1e-5, atol=1e-5)


def test_translation_batch_takes_numpy_integer_sizes_as_agreement_translation_batch_does():
    import numpy as np

    dictionary = mha.translation_dictionary(5)
    got = mha.translation_batch(np.int64(4), np.int32(6), dictionary,
                                torch.Generator().manual_seed(0))
    reference = mha.translation_batch(4, 6, dictionary, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(got, reference, strict=True))
    with pytest.raises(ValueError, match="batch_size must be an int >= 2, got 1"):
        mha.translation_batch(1, 6, dictionary, torch.Generator().manual_seed(0))


def curves_one_pass_per_point(model, importance, source, target_in, parts):
    """The curves as they were computed before the encoder's output was shared: every point a
    whole forward pass of the model (the all-heads point too, once per kind)."""
    curves = {}
    with torch.no_grad():
        for kind, name in enumerate(KINDS):
            gates = torch.ones(importance.shape)
            points = [parts(model(source, target_in, gates))]
            for layer, head in mha.pruning_order(importance[kind]):
                gates[kind, layer, head] = 0.0
                points.append(parts(model(source, target_in, gates)))
            curves[name] = {part: [p[part] for p in points] for part in points[0]}
    return curves


def test_pruning_curves_sharing_the_encoder_pass_equal_one_whole_pass_per_point():
    """kind_pruning_curves and agreement_pruning_curves run the encoder once for the curves of
    the decoder's kinds (and the all-heads point once): the same numbers, exactly, as a whole
    forward pass per point, on the chapter's test sentences for a shipped model of each
    task; and the scores given the shared memory equal the model's, bit for bit."""
    torch.set_num_threads(1)
    for recipe, load, batch, split in [
            (TRANSLATOR_RECIPE, mha.load_translator, mha.translation_batch,
             lambda p: {"token": p, "word": p // 2, "bit": p % 2}),
            (AGREEMENT_RECIPE, mha.load_agreement_translator, mha.agreement_translation_batch,
             lambda p: {"token": p, "word": p // 4, "sense": p // 2 % 2, "agreement": p % 2})]:
        dictionary = mha.translation_dictionary(recipe["vocab_size"], recipe["dictionary_seed"])
        source, target_in, target_out = batch(250, recipe["seq_len"], dictionary,
                                              torch.Generator().manual_seed(3))
        model = load(recipe["init_seeds"][1])
        importance = kind_importance(model, [batch(250, recipe["seq_len"], dictionary,
                                                   torch.Generator().manual_seed(4))])
        start = 0 if batch is mha.translation_batch else mha.models.seq2seq.FREE_POSITIONS

        def parts(scores, split=split, start=start, target=target_out):
            got, want = split(scores.argmax(-1)[:, start:]), split(target[:, start:])
            return {name: (got[name] == want[name]).double().mean().item() for name in got}

        expected = curves_one_pass_per_point(model, importance, source, target_in, parts)
        if batch is mha.translation_batch:
            got = kind_pruning_curves(model, importance, source, target_in, target_out,
                                      by_part=True)
        else:
            got = agreement_pruning_curves(model, importance, source, target_in, target_out)
        assert got == expected
        with torch.no_grad():
            gates = torch.ones(importance.shape)
            gates[2, 0, 1] = gates[1, -1, 0] = 0.0
            _, memory = model._forward(source, target_in)
            assert torch.equal(model._forward(source, target_in, gates, memory)[0],
                               model(source, target_in, gates))


def test_kind_importance_and_pruning_curves_measure_in_eval_mode_and_give_the_modes_back():
    """A model left in training mode kept its dropout on: other scores at every call."""
    torch.manual_seed(0)
    model = mha.build_translator()
    for module in model.modules():
        if isinstance(module, mha.MultiHeadAttention):
            module.dropout = 0.9  # what a model trained with dropout would carry
    dictionary = mha.translation_dictionary(16)
    batch = mha.translation_batch(4, 8, dictionary, torch.Generator().manual_seed(0))
    importance = torch.rand(3, 2, 4, generator=torch.Generator().manual_seed(1))
    got = [kind_pruning_curves(model, importance, *batch) for _ in range(2)]
    assert all(module.training for module in model.modules())  # the modes it had, back
    assert got[0] == got[1] == kind_pruning_curves(copy.deepcopy(model).eval(), importance,
                                                   *batch)
    scores = [kind_importance(model, [batch]) for _ in range(2)]
    assert all(module.training for module in model.modules())
    assert torch.equal(scores[0], scores[1])
    assert torch.equal(scores[0], kind_importance(copy.deepcopy(model).eval(), [batch]))


@pytest.mark.parametrize("dtype,vocab", [(torch.uint8, 200), (torch.int8, 100),
                                         (torch.int16, 10_000), (torch.int32, 200),
                                         # tester 49: torch's own error for these
                                         (torch.uint16, 200), (torch.uint32, 200),
                                         (torch.uint64, 200)])
def test_a_dictionary_of_a_narrow_integer_type_translates_as_an_int64_one(dtype, vocab):
    """Tester 48: 2 T[w] and 4 T[w] were computed in the dictionary's dtype and wrapped around,
    silently (a uint8 dictionary of 200 words translated word 150 as 85, a valid class)."""
    wide = mha.translation_dictionary(vocab)
    narrow = wide.to(dtype)
    source = torch.randint(vocab, (3, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(translate(source, narrow), translate(source, wide))
    for make in (mha.translation_batch, agreement_translation_batch):
        got = make(3, 6, narrow, torch.Generator().manual_seed(1))
        expected = make(3, 6, wide, torch.Generator().manual_seed(1))
        assert all(torch.equal(a, b) and a.dtype == torch.int64
                   for a, b in zip(got, expected, strict=True)), make.__name__
