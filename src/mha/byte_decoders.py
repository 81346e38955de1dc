"""The chapter-9 byte-level decoders: one recipe, three kinds of attention, trained weights.

``tools/train_decoders.py`` trains each variant with :data:`DECODER_RECIPE` and stores the
weights in ``mha/data/decoders.pt``; :func:`load_decoder` builds the model and loads them.
"""

from __future__ import annotations

from importlib import resources

import torch

from mha.decoder import TinyDecoder
from mha.latent_attention import MultiHeadLatentAttention
from mha.text_corpus import VOCAB_SIZE

#: The shared recipe: model sizes and training settings of every variant.
DECODER_RECIPE = {
    "embed_dim": 64, "num_heads": 8, "num_layers": 2, "mlp_dim": 128, "max_len": 128,
    "steps": 1200, "batch_size": 8, "length": 128, "lr": 1e-2, "init_seed": 0, "data_seed": 1,
    # multi-head; grouped-query with 2 key/value heads; latent attention with DeepSeek-V2's
    # proportions d_c = 4 d_h and d_h^R = d_h / 2
    "variants": {"mha": {"num_kv_heads": 8}, "gqa2": {"num_kv_heads": 2},
                 "mla": {"latent_dim": 32, "rope_dim": 4}},
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


def load_decoder(name: str, dtype: torch.dtype = torch.float32) -> TinyDecoder:
    """Decoder ``name`` with the weights ``tools/train_decoders.py`` trained, in eval mode."""
    model = build_decoder(name)
    with resources.files("mha").joinpath("data/decoders.pt").open("rb") as f:
        saved = torch.load(f, weights_only=True)
    if saved["recipe"] != DECODER_RECIPE:
        raise ValueError("the saved decoders were trained with another recipe: run "
                         "tools/train_decoders.py")
    model.load_state_dict({k: v.to(dtype) for k, v in saved["models"][name].items()})
    return model.to(dtype).eval()
