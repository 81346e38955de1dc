"""Chapter 9's experiments on the trained decoder: pooling key/value heads (Ainslie et al.'s
conversion to grouped-query attention), brief uptraining, and pruning at the same cache size."""

import copy

import pytest
import torch

import mha
from mha.models.decoder import language_model_loss
from mha.models.trained_models import DECODER_RECIPE as R
from mha.tasks.text_corpus import windows

UP_STEPS = R["steps"] // 20  # 5% of the original training, as in Ainslie et al.


def pooled(net, kv_heads):
    smaller = copy.deepcopy(net)
    for block in smaller.blocks:
        block.attn = mha.pool_kv_heads(block.attn, kv_heads)
    return smaller


def uptrain(net, train):
    net = copy.deepcopy(net)
    mha.train_decoder(net, train, UP_STEPS, batch_size=R["batch_size"], length=R["length"],
                      lr=1e-3, seed=7)
    return net


OTHER_RECIPES = [(UP_STEPS, 1e-3, 8), (UP_STEPS, R["lr"], 7), (2 * UP_STEPS, 1e-3, 7)]


@pytest.fixture(scope="module")
def models():
    """The trained multi-head decoder, its pooled (GQA, 2 key/value heads) and its pruned
    (each layer's two most important heads) versions, and the data: built once for the module."""
    torch.set_num_threads(1)
    train, held_out = mha.text_splits()
    model = mha.load_decoder("mha")
    gen = torch.Generator().manual_seed(5)
    batches = [windows(train, 16, R["length"], gen) for _ in range(2)]

    def loss_with_gates(batch, gates):
        return language_model_loss(model(batch[0], head_mask=gates), batch[1])

    importance = mha.head_importance(loss_with_gates, batches, R["num_layers"], R["num_heads"])
    pruned = copy.deepcopy(model)  # keep each layer's two most important heads
    for block, row in zip(pruned.blocks, importance, strict=True):
        keep = torch.zeros(R["num_heads"], dtype=torch.bool)
        keep[row.topk(2).indices] = True
        block.attn = mha.prune_heads(block.attn, (~keep).nonzero().flatten().tolist())
    return {"train": train, "held_out": held_out, "mha": model, "gqa": pooled(model, 2),
            "pruned": pruned}


@pytest.fixture(scope="module")
def gqa_after_other_recipes(models):
    """Bits per byte of the pooled model trained by each of OTHER_RECIPES (two tests read them:
    each recipe is trained once)."""
    after = []
    for steps, lr, seed in OTHER_RECIPES:
        net = copy.deepcopy(models["gqa"])
        mha.train_decoder(net, models["train"], steps, batch_size=R["batch_size"],
                          length=R["length"], lr=lr, seed=seed)
        after.append(mha.bits_per_byte(net, models["held_out"]))
    return after


@pytest.fixture(scope="module")
def results(models):
    train, held_out, model = models["train"], models["held_out"], models["mha"]
    gqa, pruned = models["gqa"], models["pruned"]

    def bpb(net, **kwargs):
        return mha.bits_per_byte(net, held_out, **kwargs)

    def cache_bytes(net):
        caches = net.new_caches()
        with torch.no_grad():
            net(torch.randint(256, (1, 10)), caches=caches)
        return sum(c.nbytes for c in caches)

    return {"base": bpb(model), "control": bpb(uptrain(model, train)),
            "scratch": bpb(mha.load_decoder("gqa2")),
            "gqa": bpb(gqa), "gqa_up": bpb(uptrain(gqa, train)),
            "pruned": bpb(pruned), "pruned_up": bpb(uptrain(pruned, train)),
            "caches": (cache_bytes(gqa), cache_bytes(pruned))}


@pytest.mark.claim("9.7")
def test_uptraining_wins_back_most_of_what_pooling_lost_but_not_all(results):
    """Ainslie et al.: mean-pool a multi-head checkpoint into GQA, train for 5% of the original
    steps, and come close to multi-head quality. On the toy decoder (8 heads -> 2 key/value
    heads): pooling costs over 2 bits per byte, 5% of the steps win back between half and all of
    it, but the result stays behind the multi-head model trained for as long and behind a GQA
    model trained from scratch."""
    r = results
    lost = r["gqa"] - r["base"]
    assert lost > 2.0
    won_back = (r["gqa"] - r["gqa_up"]) / lost
    assert 0.5 < won_back < 1.0
    assert r["gqa_up"] > r["control"] + 0.5  # still behind multi-head, trained as long
    assert r["gqa_up"] > r["scratch"]  # and behind GQA trained from scratch
    # the chapter's printed numbers (differences of the values rounded to 3 digits, as printed)
    assert round(round(r["gqa"], 3) - round(r["base"], 3), 3) == 2.415
    assert round(100 * won_back) == 72
    assert round(round(r["gqa_up"], 3) - round(r["control"], 3), 3) == 0.681


@pytest.mark.claim("9.8")
def test_at_the_same_cache_pruning_wins_at_once_and_pooling_after_training(results):
    """Chapter 7's pruning against GQA's pooling, both at 2 key/value heads per layer (the same
    cache): keeping the two most important heads loses less right away; after the same 5% of
    training the pooled model is (narrowly) better."""
    r = results
    assert r["caches"][0] == r["caches"][1]
    assert r["pruned"] < r["gqa"]
    assert r["gqa_up"] < r["pruned_up"]
    rounded = {name: round(r[name], 3) for name in ("pruned", "gqa", "gqa_up", "pruned_up")}
    assert rounded == {"pruned": 5.414, "gqa": 5.762, "gqa_up": 4.030, "pruned_up": 4.243}


@pytest.mark.claim("9.8")
def test_sharing_removes_key_value_heads_whole_but_merges_them_and_keeps_every_query():
    """The first half of the claim, "sharing key/value heads is structured pruning": pooling
    8 heads into 2 key/value heads removes key/value parameters in whole-head blocks and caches
    as little as pruning to 2 heads, but it keeps all 8 query heads and W_O, and its key/value
    heads are means of the old ones, none of them a kept head (pruning keeps 2 heads as they
    were and drops the other 6 with their queries)."""
    torch.manual_seed(0)
    d, h, d_k = 32, 8, 4
    layer = mha.MultiHeadAttention(d, h, head_dim=d_k).double()
    gqa = mha.pool_kv_heads(layer, 2)
    pruned = mha.prune_heads(layer, [2, 3, 4, 5, 6, 7])
    for new in (gqa, pruned):
        assert new.k_proj.weight.shape == new.v_proj.weight.shape == (2 * d_k, d)
    assert torch.equal(gqa.q_proj.weight, layer.q_proj.weight)  # every query head stays
    assert torch.equal(gqa.out_proj.weight, layer.out_proj.weight)
    assert pruned.q_proj.weight.shape == (2 * d_k, d)  # pruning drops 6 query heads
    old_k = layer.k_proj.weight.view(h, d_k, d)
    new_k = gqa.k_proj.weight.view(2, d_k, d)
    torch.testing.assert_close(new_k, old_k.view(2, 4, d_k, d).mean(dim=1), rtol=0, atol=1e-15)
    assert not any(torch.allclose(new_k[g], old_k[i]) for g in range(2) for i in range(h))
    assert torch.equal(pruned.k_proj.weight.view(2, d_k, d), old_k[:2])  # a kept subset


@pytest.mark.claim("9.7")
def test_other_uptraining_seeds_rates_and_lengths_also_stay_behind(models, gqa_after_other_recipes):
    """The chapter's uptraining is one run of one recipe; the same pooled model uptrained with
    another batch seed (8), a ten times larger learning rate (the original training's) and
    twice the steps (10% of the original) stays more than 0.3 bits per byte behind the
    multi-head model in every case (one thread; the runs are shared with the next test)."""
    base = mha.bits_per_byte(models["mha"], models["held_out"])
    for recipe, after in zip(OTHER_RECIPES, gqa_after_other_recipes, strict=True):
        print("uptrained GQA", recipe, "behind multi-head by", after - base)
        assert after > base + 0.3, recipe


@pytest.mark.claim("9.8")
def test_pooling_stays_ahead_of_pruning_after_other_training_seeds_rates_and_lengths(
        models, gqa_after_other_recipes):
    """The second half of row 9.8 rests on one run (4.030 against 4.243 bits per byte). Train
    the pooled and the pruned model (the results fixture's recipe) with another batch seed (8),
    the original training's learning rate and twice the steps: pooling stays ahead in every case,
    by more than 0.15 bits per byte (one thread; the pooled runs are the test above's)."""
    for recipe, gqa_after in zip(OTHER_RECIPES, gqa_after_other_recipes, strict=True):
        steps, lr, seed = recipe
        net = copy.deepcopy(models["pruned"])
        mha.train_decoder(net, models["train"], steps, batch_size=R["batch_size"],
                          length=R["length"], lr=lr, seed=seed)
        pruned_after = mha.bits_per_byte(net, models["held_out"])
        print("pooling ahead of pruning", recipe, "by", pruned_after - gqa_after)
        assert gqa_after < pruned_after - 0.15, (recipe, gqa_after, pruned_after)
