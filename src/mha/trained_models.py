"""The chapter-9 trained models: their recipes, and the weights the package ships.

A model has to learn before pruning or sharing its heads means anything, and learning takes
longer than a notebook may run: about a minute of CPU for each byte-level decoder, half a
minute for the translator. ``tools/train_models.py`` trains them with these recipes (the same
code the notebook uses, one thread, fixed seeds) and stores the weights in float16 in
``mha/data/``; the loaders below rebuild the models and load them.
"""

from __future__ import annotations

from importlib import resources

import torch
from torch import nn

from mha.decoder import TinyDecoder
from mha.latent_attention import MultiHeadLatentAttention
from mha.seq2seq import TinyTranslator
from mha.text_corpus import VOCAB_SIZE

#: The decoders: one recipe, three kinds of attention.
DECODER_RECIPE = {
    "embed_dim": 64, "num_heads": 8, "num_layers": 2, "mlp_dim": 128, "max_len": 64,
    "steps": 1200, "batch_size": 16, "length": 64, "lr": 1e-2, "init_seed": 0, "data_seed": 1,
    # multi-head; grouped-query with 2 key/value heads; latent attention with DeepSeek-V2's
    # proportions d_c = 4 d_h and d_h^R = d_h / 2
    "variants": {"mha": {"num_kv_heads": 8}, "gqa2": {"num_kv_heads": 2},
                 "mla": {"latent_dim": 32, "rope_dim": 4}},
}

#: The encoder-decoder of the toy translation task (mha.seq2seq).
TRANSLATOR_RECIPE = {
    "vocab_size": 16, "seq_len": 8, "embed_dim": 64, "num_heads": 4, "num_layers": 2,
    "steps": 600, "batch_size": 64, "lr": 5e-3, "init_seed": 0, "data_seed": 1,
    "dictionary_seed": 0,
}


def build_decoder(name: str) -> TinyDecoder:
    """A freshly initialised decoder of variant ``name`` (``"mha"``, ``"gqa2"`` or ``"mla"``)."""
    r = DECODER_RECIPE
    if name not in r["variants"]:
        raise ValueError(f"name must be one of {sorted(r['variants'])}, got {name!r}")
    options = r["variants"][name]
    sizes = dict(embed_dim=r["embed_dim"], num_heads=r["num_heads"], num_layers=r["num_layers"],
                 mlp_dim=r["mlp_dim"])
    if "latent_dim" in options:
        def make_attention():
            return MultiHeadLatentAttention(r["embed_dim"], r["num_heads"], **options)
        return TinyDecoder(VOCAB_SIZE, r["max_len"], make_attention=make_attention, **sizes)
    return TinyDecoder(VOCAB_SIZE, r["max_len"], num_kv_heads=options["num_kv_heads"], **sizes)


def build_translator() -> TinyTranslator:
    """A freshly initialised translator for the toy task of :mod:`mha.seq2seq`."""
    r = TRANSLATOR_RECIPE
    v = r["vocab_size"]
    # source words 0..V-1; target words 0..2V-1 and the start symbol 2V; 2V classes
    return TinyTranslator(v, 2 * v + 1, 2 * v, r["seq_len"], embed_dim=r["embed_dim"],
                          num_heads=r["num_heads"], num_layers=r["num_layers"])


def _load(model: nn.Module, file: str, recipe: dict, key: str | None) -> nn.Module:
    with resources.files("mha").joinpath(f"data/{file}").open("rb") as f:
        saved = torch.load(f, weights_only=True)
    if saved["recipe"] != recipe:
        raise ValueError(f"data/{file} was trained with another recipe: run "
                         f"tools/train_models.py")
    state = saved["models"][key] if key else saved["model"]
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


def load_decoder(name: str) -> TinyDecoder:
    """Decoder ``name`` with the weights ``tools/train_models.py`` trained, in eval mode."""
    return _load(build_decoder(name), "decoders.pt", DECODER_RECIPE, name)


def load_translator() -> TinyTranslator:
    """The translator with the weights ``tools/train_models.py`` trained, in eval mode."""
    return _load(build_translator(), "translator.pt", TRANSLATOR_RECIPE, None)
