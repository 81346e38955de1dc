"""Train chapters 7 and 9's models and save them into the package, ``src/mha/data/``.

    .venv/bin/python tools/train_models.py [encoder] [decoders] [translator]

``encoder`` trains chapter 7's encoder of the neighbour look-up into ``lookup_encoder.pt``
(float32, 0.3 MB, so the chapter's digits are those of a model trained in the notebook);
``decoders`` trains the three byte-level decoders (multi-head, grouped-query, latent
attention) into ``decoders.pt``, ``translator`` the encoder-decoder of the toy translation task
into ``translator.pt``; with no argument, all three. Each model takes about a minute of CPU or less,
more than the notebook may spend, so the package ships the weights (float16, a few hundred kB in
all). The recipes are in ``mha.trained_models``; training uses one thread and fixed seeds, so
running the script again with the same torch gives the same files.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import mha
from mha.neighbour_task import train
from mha.trained_models import (
    DECODER_RECIPE,
    ENCODER_RECIPE,
    TRANSLATOR_RECIPE,
    build_decoder,
    build_translator,
    train_lookup_encoder,
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
                "log": {"loss": log["loss"], "cpu_seconds": seconds}},
               DATA / "lookup_encoder.pt")


def decoders() -> None:
    r = DECODER_RECIPE
    text, _ = mha.text_splits()
    saved = {"recipe": r, "models": {}}
    for name in r["variants"]:
        torch.manual_seed(r["init_seed"])
        model = build_decoder(name)
        start = time.process_time()
        mha.train_decoder(model, text, r["steps"], lr=r["lr"], batch_size=r["batch_size"],
                          length=r["length"], seed=r["data_seed"])
        print(f"decoder {name}: {time.process_time() - start:.0f} s of CPU", flush=True)
        saved["models"][name] = half(model)
    torch.save(saved, DATA / "decoders.pt")


def translator() -> None:
    r = TRANSLATOR_RECIPE
    dictionary = mha.translation_dictionary(r["vocab_size"], r["dictionary_seed"])
    generator = torch.Generator().manual_seed(r["data_seed"])
    torch.manual_seed(r["init_seed"])
    model = build_translator()

    def batches(step):
        source, target_in, target_out = mha.translation_batch(
            r["batch_size"], r["seq_len"], dictionary, generator)
        return (source, target_in), target_out

    start = time.process_time()
    train(model, batches, r["steps"], lr=r["lr"], forward=lambda pair: model(*pair))
    print(f"translator: {time.process_time() - start:.0f} s of CPU", flush=True)
    torch.save({"recipe": r, "model": half(model)}, DATA / "translator.pt")


def main() -> None:
    torch.set_num_threads(1)
    DATA.mkdir(exist_ok=True)
    todo = sys.argv[1:] or ["encoder", "decoders", "translator"]
    for job in todo:
        {"encoder": encoder, "decoders": decoders, "translator": translator}[job]()
    for path in sorted(DATA.glob("*.pt")):
        print(f"{path.name}: {path.stat().st_size / 1000:.0f} kB")


if __name__ == "__main__":
    main()
