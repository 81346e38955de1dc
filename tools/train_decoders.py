"""Train the chapter-9 decoders and save them into the package (``src/mha/data/decoders.pt``).

    .venv/bin/python tools/train_decoders.py

Chapter 9 compares multi-head, grouped-query and latent attention on a byte-level model of
real text. A model has to learn to use its context before such a comparison means anything,
which takes about a minute of CPU per model, more than the notebook may spend; so this script
trains them once, with the code the notebook uses (``mha.train_decoder``, one thread, fixed
seeds), and the package ships the weights in float16 (a few hundred kB). Running it again on
the same torch version gives the same file.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

import mha
from mha.byte_decoders import DECODER_RECIPE, build_decoder

OUT = Path(__file__).resolve().parent.parent / "src" / "mha" / "data" / "decoders.pt"


def main() -> None:
    torch.set_num_threads(1)
    train, _ = mha.text_splits()
    saved = {"recipe": DECODER_RECIPE, "models": {}}
    for name in DECODER_RECIPE["variants"]:
        torch.manual_seed(DECODER_RECIPE["init_seed"])
        model = build_decoder(name)
        start = time.process_time()
        mha.train_decoder(model, train, DECODER_RECIPE["steps"], lr=DECODER_RECIPE["lr"],
                          batch_size=DECODER_RECIPE["batch_size"],
                          length=DECODER_RECIPE["length"], seed=DECODER_RECIPE["data_seed"])
        print(f"{name}: {time.process_time() - start:.0f} s of CPU", flush=True)
        saved["models"][name] = {k: v.half() for k, v in model.state_dict().items()}
    OUT.parent.mkdir(exist_ok=True)
    torch.save(saved, OUT)
    print(f"wrote {OUT.name}: {OUT.stat().st_size / 1000:.0f} kB")


if __name__ == "__main__":
    main()
