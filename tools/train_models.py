"""Train chapters 7 and 9's models and save them into the package, ``src/mha/data/``.

    .venv/bin/python tools/train_models.py [encoder] [decoders] [translator] [agreement]

``encoder`` trains chapter 7's encoder of the neighbour look-up into ``lookup_encoder.pt``
(float32, 0.3 MB, so the chapter's digits are those of a model trained in the notebook);
``decoders`` trains the three byte-level decoders (multi-head, grouped-query, latent
attention) into ``decoders.pt``, ``translator`` the encoder-decoder of the toy translation task,
once per seed of ``TRANSLATOR_RECIPE["init_seeds"]``, into ``translator.pt``, ``agreement`` the
translator of the agreement task (row 7.5), once per seed of ``AGREEMENT_RECIPE["init_seeds"]``,
into ``agreement_translator.pt``; with no argument, all four. Each model takes about a minute
of CPU or less, more than the notebook may spend, so the package ships the weights (float16,
about 3 MB in all). The recipes and the training code are in ``mha.models.trained_models``;
training uses one thread and fixed seeds, so running the
script again with the same code and torch gives the same files. Each file also stores the
fingerprint of every model's first steps, which ``tests/test_trained_models.py`` recomputes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from mha.models.trained_models import (
    AGREEMENT_RECIPE,
    DECODER_RECIPE,
    ENCODER_RECIPE,
    TRANSLATOR_RECIPE,
    agreement_translator_fingerprint,
    decoder_fingerprint,
    lookup_encoder_fingerprint,
    train_agreement_translator,
    train_decoder_variant,
    train_lookup_encoder,
    train_translator,
    translator_fingerprint,
)

DATA = Path(__file__).resolve().parent.parent / "src" / "mha" / "data"


def half(model: torch.nn.Module) -> dict:
    return {k: v.half() for k, v in model.state_dict().items()}


def encoder() -> None:
    start = time.process_time()
    model, log = train_lookup_encoder()
    seconds = time.process_time() - start
    print(f"encoder: {seconds:.0f} s of CPU, last batch loss {log['loss']:.3f}", flush=True)
    torch.save({"recipe": ENCODER_RECIPE, "model": model.state_dict(),
                "log": {"loss": log["loss"], "cpu_seconds": seconds},
                "fingerprints": {None: lookup_encoder_fingerprint()}},
               DATA / "lookup_encoder.pt")


def decoders() -> None:
    r = DECODER_RECIPE
    saved = {"recipe": r, "models": {}, "fingerprints": {}}
    for name in r["variants"]:
        start = time.process_time()
        model, _ = train_decoder_variant(name)
        print(f"decoder {name}: {time.process_time() - start:.0f} s of CPU", flush=True)
        saved["models"][name] = half(model)
        saved["fingerprints"][name] = decoder_fingerprint(name)
    torch.save(saved, DATA / "decoders.pt")


def translator() -> None:
    r = TRANSLATOR_RECIPE
    saved = {"recipe": r, "models": {}, "fingerprints": {}}
    for seed in r["init_seeds"]:
        start = time.process_time()
        model, _ = train_translator(seed)
        print(f"translator, seed {seed}: {time.process_time() - start:.0f} s of CPU", flush=True)
        saved["models"][seed] = half(model)
        saved["fingerprints"][seed] = translator_fingerprint(seed)
    torch.save(saved, DATA / "translator.pt")


def agreement() -> None:
    r = AGREEMENT_RECIPE
    saved = {"recipe": r, "models": {}, "fingerprints": {}}
    for seed in r["init_seeds"]:
        start = time.process_time()
        model, _ = train_agreement_translator(seed)
        print(f"agreement translator, seed {seed}: {time.process_time() - start:.0f} s of CPU",
              flush=True)
        saved["models"][seed] = half(model)
        saved["fingerprints"][seed] = agreement_translator_fingerprint(seed)
    torch.save(saved, DATA / "agreement_translator.pt")


def main() -> None:
    torch.set_num_threads(1)
    DATA.mkdir(exist_ok=True)
    todo = sys.argv[1:] or ["encoder", "decoders", "translator", "agreement"]
    for job in todo:
        {"encoder": encoder, "decoders": decoders, "translator": translator,
         "agreement": agreement}[job]()
    for path in sorted(DATA.glob("*.pt")):
        print(f"{path.name}: {path.stat().st_size / 1000:.0f} kB")


if __name__ == "__main__":
    main()
