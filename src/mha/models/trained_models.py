"""The trained models of chapters 7 and 9: their recipes, and the weights the package ships.

A model has to learn before pruning or sharing its heads means anything, and learning takes
longer than a notebook may run: about 17 s of CPU for chapter 7's encoder, about a minute for
each byte-level decoder of chapter 9, half a minute for each of its translators.
``tools/train_models.py`` trains them with these recipes and the training functions below (one
thread, fixed seeds) and stores the weights in ``mha/data/`` (float32 for the encoder, so
chapter 7 prints the digits it would print after training the model itself; float16 for the
others); the loaders below rebuild the models and load them.

Each file also stores a *fingerprint* of every model's training: the last loss and
the sums of the parameters after the first ``FINGERPRINT_STEPS`` steps of the same run (same
code, seeds and schedule). A test re-runs those steps in a few seconds and compares, so a change
of the code that would make the recipe give other weights is caught without a full retrain.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from importlib import resources

import torch
from torch import nn

from mha._validation import SEED_MAX, require_seed
from mha.layers.latent_attention import MultiHeadLatentAttention
from mha.models.decoder import TinyDecoder
from mha.models.encoder import TinyEncoder
from mha.models.seq2seq import TinyTranslator
from mha.tasks.neighbour_task import lookup_batch, train
from mha.tasks.text_corpus import VOCAB_SIZE

#: Chapter 7's encoder for the neighbour look-up (mha.tasks.neighbour_task): 12 symbols from a
#: vocabulary of 16, a start symbol in front; two layers of eight heads.
ENCODER_RECIPE = {
    "vocab_size": 16, "symbols": 12, "embed_dim": 64, "num_heads": 8, "num_layers": 2,
    "steps": 1000, "batch_size": 64, "lr": 5e-3, "init_seed": 0, "data_seed": 2,
}

#: The decoders: one recipe, three kinds of attention.
DECODER_RECIPE = {
    "embed_dim": 64, "num_heads": 8, "num_layers": 2, "mlp_dim": 128, "max_len": 64,
    "steps": 1200, "batch_size": 16, "length": 64, "lr": 1e-2, "init_seed": 0, "data_seed": 1,
    # multi-head; grouped-query with 2 key/value heads; latent attention with DeepSeek-V2's
    # proportions d_c = 4 d_h and d_h^R = d_h / 2
    "variants": {"mha": {"num_kv_heads": 8}, "gqa2": {"num_kv_heads": 2},
                 "mla": {"latent_dim": 32, "rope_dim": 4}},
}

#: The encoder-decoder of the toy translation task (mha.models.seq2seq), trained once per seed in
#: ``init_seeds``: initialised from ``torch.manual_seed(s)``, batches from a generator seeded
#: with ``data_seed + 100 s`` (:func:`translator_data_seed`); seed 0 is the chapter's main model.
#: ``init_seed`` is not read for the translator (:func:`train_translator` takes the seed as an
#: argument): it is seed 0's value, kept because the shipped file records this recipe.
TRANSLATOR_RECIPE = {
    "vocab_size": 16, "seq_len": 8, "embed_dim": 64, "num_heads": 4, "num_layers": 2,
    "steps": 600, "batch_size": 64, "lr": 5e-3, "init_seed": 0, "data_seed": 1,
    "dictionary_seed": 0, "init_seeds": [0, 1, 2, 3, 4, 5],
}

#: The encoder-decoder of the agreement task
#: (:func:`mha.models.seq2seq.agreement_translation_batch`),
#: in which each kind of attention carries a part of the translation (row 7.5): trained once
#: per seed as the translator is, smaller (width 32) because the task needs less.
AGREEMENT_RECIPE = {
    "vocab_size": 16, "seq_len": 8, "embed_dim": 32, "num_heads": 4, "num_layers": 2,
    "steps": 400, "batch_size": 64, "lr": 5e-3, "data_seed": 1, "dictionary_seed": 0,
    "init_seeds": [0, 1, 2, 3, 4, 5],
}

#: How many first steps of a training run its fingerprint covers.
FINGERPRINT_STEPS = 20


def build_lookup_encoder() -> TinyEncoder:
    """A freshly initialised chapter-7 encoder (from the global RNG: seed it first).

    Raises nothing of its own."""
    r = ENCODER_RECIPE
    # input symbols 0..V-1 and the start symbol V; V classes; positions: the start symbol + n
    return TinyEncoder(r["vocab_size"] + 1, r["vocab_size"], r["symbols"] + 1,
                       embed_dim=r["embed_dim"], num_heads=r["num_heads"],
                       num_layers=r["num_layers"])


def train_lookup_encoder(stop_after: int | None = None) -> tuple[TinyEncoder, dict[str, float]]:
    """Initialise and train chapter 7's encoder by ``ENCODER_RECIPE``: Adam, cosine schedule,
    fresh random batches (``stop_after``: only the first steps of that run). Returns the model
    and ``train``'s log (last loss, seconds).

    Raises ``ValueError`` naming ``stop_after`` (a positive int or None)."""
    r = ENCODER_RECIPE
    with torch.random.fork_rng(devices=[]):  # the recipe's seed, not the caller's RNG state
        torch.manual_seed(r["init_seed"])
        model = build_lookup_encoder()
        data = torch.Generator().manual_seed(r["data_seed"])
        log = train(model, lambda step: lookup_batch(r["batch_size"], r["symbols"],
                                                     r["vocab_size"], data),
                    r["steps"], lr=r["lr"], stop_after=stop_after)
    return model, log


def build_decoder(name: str) -> TinyDecoder:
    """A freshly initialised decoder of variant ``name`` (``"mha"``, ``"gqa2"`` or ``"mla"``).

    Raises ``ValueError`` naming ``name`` when it is not a variant."""
    r = DECODER_RECIPE
    if not isinstance(name, str) or name not in r["variants"]:
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
    """A freshly initialised translator for the toy task of :mod:`mha.models.seq2seq`.

    Raises nothing of its own."""
    r = TRANSLATOR_RECIPE
    v = r["vocab_size"]
    # source words 0..V-1; target words 0..2V-1 and the start symbol 2V; 2V classes
    return TinyTranslator(v, 2 * v + 1, 2 * v, r["seq_len"], embed_dim=r["embed_dim"],
                          num_heads=r["num_heads"], num_layers=r["num_layers"])


def build_agreement_translator() -> TinyTranslator:
    """A freshly initialised translator for the agreement task, by ``AGREEMENT_RECIPE``.

    Raises nothing of its own."""
    r = AGREEMENT_RECIPE
    v = r["vocab_size"]
    # source words 0..V-1; target words 0..4V-1 and the start symbol 4V; 4V classes
    return TinyTranslator(v, 4 * v + 1, 4 * v, r["seq_len"], embed_dim=r["embed_dim"],
                          num_heads=r["num_heads"], num_layers=r["num_layers"])


def train_decoder_variant(name: str, stop_after: int | None = None) -> tuple[TinyDecoder, dict]:
    """Initialise and train decoder ``name`` by ``DECODER_RECIPE`` on ``mha.text_splits()``'s
    training bytes (``stop_after``: only the first steps of that run). Returns the model (in
    eval mode) and ``train``'s log."""
    from mha.models.decoder import train_decoder
    from mha.tasks.text_corpus import text_splits

    r = DECODER_RECIPE
    text, _ = text_splits()
    with torch.random.fork_rng(devices=[]):  # the recipe's seed, not the caller's RNG state
        torch.manual_seed(r["init_seed"])
        model = build_decoder(name)
        log = train_decoder(model, text, r["steps"], lr=r["lr"], batch_size=r["batch_size"],
                            length=r["length"], seed=r["data_seed"], stop_after=stop_after)
    return model.eval(), log


def _largest_init_seed(recipe: dict) -> int:
    """The largest ``init_seed`` whose batches' seed, ``data_seed + 100 init_seed``, torch takes."""
    return (SEED_MAX - recipe["data_seed"]) // 100


def translator_data_seed(init_seed: int) -> int:
    """The seed of the batches for the translator initialised with ``init_seed``."""
    return TRANSLATOR_RECIPE["data_seed"] + 100 * init_seed


def train_translator(init_seed: int = 0,
                     stop_after: int | None = None) -> tuple[TinyTranslator, dict]:
    """Initialise (``torch.manual_seed(init_seed)``) and train a translator by
    ``TRANSLATOR_RECIPE`` (``stop_after``: only the first steps of that run). Returns the model
    and ``train``'s log. Raises ``ValueError`` naming ``init_seed`` unless it is an int from 0 to
    the largest whose batches' seed torch takes (:func:`translator_data_seed`)."""
    from mha.models.seq2seq import translation_batch, translation_dictionary

    init_seed = require_seed("init_seed", init_seed, maximum=_largest_init_seed(TRANSLATOR_RECIPE))
    r = TRANSLATOR_RECIPE
    dictionary = translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    generator = torch.Generator().manual_seed(translator_data_seed(init_seed))

    def batches(step):
        source, target_in, target_out = translation_batch(
            r["batch_size"], r["seq_len"], dictionary, generator)
        return (source, target_in), target_out

    with torch.random.fork_rng(devices=[]):  # init_seed, not the caller's RNG state
        torch.manual_seed(init_seed)
        model = build_translator()
        log = train(model, batches, r["steps"], lr=r["lr"], forward=lambda pair: model(*pair),
                    stop_after=stop_after)
    return model, log


def train_agreement_translator(init_seed: int = 0,
                               stop_after: int | None = None) -> tuple[TinyTranslator, dict]:
    """Initialise (``torch.manual_seed(init_seed)``) and train a translator of the agreement
    task by ``AGREEMENT_RECIPE``, on batches from a generator seeded with ``data_seed + 100
    init_seed`` (``stop_after``: only the first steps of that run). Returns the model and
    ``train``'s log. Raises ``ValueError`` naming ``init_seed`` unless it is an int from 0 to
    the largest that keeps that seed within torch's 2**64 - 1."""
    from mha.models.seq2seq import agreement_translation_batch, translation_dictionary

    init_seed = require_seed("init_seed", init_seed, maximum=_largest_init_seed(AGREEMENT_RECIPE))
    r = AGREEMENT_RECIPE
    dictionary = translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    generator = torch.Generator().manual_seed(r["data_seed"] + 100 * init_seed)

    def batches(step):
        source, target_in, target_out = agreement_translation_batch(
            r["batch_size"], r["seq_len"], dictionary, generator)
        return (source, target_in), target_out

    with torch.random.fork_rng(devices=[]):  # init_seed, not the caller's RNG state
        torch.manual_seed(init_seed)
        model = build_agreement_translator()
        log = train(model, batches, r["steps"], lr=r["lr"], forward=lambda pair: model(*pair),
                    stop_after=stop_after)
    return model, log


def fingerprint(model: nn.Module, log: dict) -> dict[str, float]:
    """The last loss of ``log`` and the sum and absolute sum of ``model``'s parameters
    (float64)."""
    params = [p.detach().double() for p in model.parameters()]
    return {"loss": float(log["loss"]), "sum": float(sum(p.sum() for p in params)),
            "abs_sum": float(sum(p.abs().sum() for p in params))}


def lookup_encoder_fingerprint() -> dict[str, float]:
    """The fingerprint of the first ``FINGERPRINT_STEPS`` steps of chapter 7's encoder."""
    return fingerprint(*train_lookup_encoder(stop_after=FINGERPRINT_STEPS))


def decoder_fingerprint(name: str) -> dict[str, float]:
    """The fingerprint of decoder ``name``'s first ``FINGERPRINT_STEPS`` training steps."""
    return fingerprint(*train_decoder_variant(name, stop_after=FINGERPRINT_STEPS))


def translator_fingerprint(init_seed: int = 0) -> dict[str, float]:
    """The fingerprint of the first ``FINGERPRINT_STEPS`` training steps of the translator
    with ``init_seed``."""
    return fingerprint(*train_translator(init_seed, stop_after=FINGERPRINT_STEPS))


def agreement_translator_fingerprint(init_seed: int = 0) -> dict[str, float]:
    """The fingerprint of the first ``FINGERPRINT_STEPS`` training steps of the agreement
    task's translator with ``init_seed``."""
    return fingerprint(*train_agreement_translator(init_seed, stop_after=FINGERPRINT_STEPS))


def saved_fingerprints(file: str) -> dict:
    """The fingerprints stored in ``data/{file}`` (``"decoders.pt"``, ``"translator.pt"`` or
    ``"agreement_translator.pt"``: by
    variant name or init seed; ``"lookup_encoder.pt"``: the one model's, under ``None``)."""
    return _saved(file)["fingerprints"]


def _saved(file: str) -> dict:
    with resources.files("mha").joinpath(f"data/{file}").open("rb") as f:
        return torch.load(f, weights_only=True)


def _load(build: Callable[[], nn.Module], file: str, recipe: dict,
          key: str | int | None) -> nn.Module:
    with torch.random.fork_rng(devices=[]):  # its random start is overwritten: keep the
        model = build()                      # caller's RNG as it was (tester 47)
    saved = _saved(file)
    if saved["recipe"] != recipe:
        raise ValueError(f"data/{file} was trained with another recipe: run "
                         f"tools/train_models.py")
    state = saved["model"] if key is None else saved["models"][key]
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


def load_lookup_encoder() -> TinyEncoder:
    """Chapter 7's encoder with the weights ``tools/train_models.py`` trained, in eval mode,
    with gradients off (chapter 7 trains only gates on top of it).

    Raises ``ValueError`` when the shipped weights were trained with another recipe (run
    ``tools/train_models.py``)."""
    return _load(build_lookup_encoder, "lookup_encoder.pt", ENCODER_RECIPE,
                 None).requires_grad_(False)


def lookup_encoder_training_log() -> dict[str, float]:
    """What training chapter 7's encoder printed: the last batch's loss, seconds of CPU."""
    return _saved("lookup_encoder.pt")["log"]


def load_decoder(name: str) -> TinyDecoder:
    """Decoder ``name`` with the weights ``tools/train_models.py`` trained, in eval mode.

    Raises ``ValueError`` naming ``name`` when it is not one of the trained ones, or when the
    shipped weights were trained with another recipe (run ``tools/train_models.py``)."""
    return _load(lambda: build_decoder(name), "decoders.pt", DECODER_RECIPE, name)


def load_translator(init_seed: int = 0) -> TinyTranslator:
    """The translator trained from ``init_seed`` (one of ``TRANSLATOR_RECIPE["init_seeds"]``;
    0 is the chapter's main model) with the weights ``tools/train_models.py`` trained, in eval
    mode.

    Raises ``ValueError`` naming ``init_seed`` when it is not one of the trained ones, or when
    the shipped weights were trained with another recipe (run ``tools/train_models.py``)."""
    seeds = TRANSLATOR_RECIPE["init_seeds"]
    # an int: a 0-d tensor compares equal to one, then finds no saved model (tester 48)
    if not isinstance(init_seed, numbers.Integral) or isinstance(init_seed, bool) \
            or init_seed not in seeds:
        raise ValueError(f"init_seed must be one of {seeds}, got {init_seed!r}")
    return _load(build_translator, "translator.pt", TRANSLATOR_RECIPE, init_seed)


def load_agreement_translator(init_seed: int = 0) -> TinyTranslator:
    """The agreement task's translator trained from ``init_seed`` (one of
    ``AGREEMENT_RECIPE["init_seeds"]``) with the weights ``tools/train_models.py`` trained, in
    eval mode.

    Raises ``ValueError`` naming ``init_seed`` when it is not one of the trained ones, or when
    the shipped weights were trained with another recipe (run ``tools/train_models.py``)."""
    seeds = AGREEMENT_RECIPE["init_seeds"]
    if not isinstance(init_seed, numbers.Integral) or isinstance(init_seed, bool) \
            or init_seed not in seeds:
        raise ValueError(f"init_seed must be one of {seeds}, got {init_seed!r}")
    return _load(build_agreement_translator, "agreement_translator.pt", AGREEMENT_RECIPE,
                 init_seed)
