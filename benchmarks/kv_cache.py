"""Generation speed with and without the KV cache, and the cache's size against the formula.

    .venv/bin/python benchmarks/kv_cache.py [--threads 1] [--repeats 5] [--new 32] [--out FILE]

For each prefix length ``n`` (64 ... 1024) a decoder with chapter 9's sizes (``d = 64``, 8
heads, 2 layers; untrained, since speed does not depend on the weights) extends a random
prompt of ``n`` bytes by ``--new`` tokens, greedily, twice: with a KV cache (the prompt goes
through once, then one token per step) and without (every step recomputes the whole
sequence). The two runs take turns within every repeat, so a busy machine slows both alike;
the table reports the median tokens per second of each and their ratio. The two must produce
the same tokens, which the script checks.

A second table lists the bytes the caches hold after a prompt of ``n`` tokens, for multi-head,
grouped-query and multi-query attention and for latent attention, next to the formula
``2 * layers * kv_heads * head_dim * tokens * bytes`` (for latent attention,
``layers * (d_c + d_R) * tokens * bytes``). This is a script, not a test: timings depend on the
machine.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time

import torch

import mha

PREFIXES = [64, 128, 256, 512, 1024]
EMBED_DIM, HEADS, LAYERS, MLP = 64, 8, 2, 128


def decoder(max_len: int, **attention) -> mha.TinyDecoder:
    torch.manual_seed(0)
    if "latent_dim" in attention:
        def make():
            return mha.MultiHeadLatentAttention(EMBED_DIM, HEADS, **attention)
        return mha.TinyDecoder(256, max_len, embed_dim=EMBED_DIM, num_heads=HEADS,
                               num_layers=LAYERS, mlp_dim=MLP, make_attention=make).eval()
    return mha.TinyDecoder(256, max_len, embed_dim=EMBED_DIM, num_heads=HEADS,
                           num_layers=LAYERS, mlp_dim=MLP, **attention).eval()


def speed(repeats: int, new: int) -> list[dict]:
    model = decoder(max(PREFIXES) + new)
    rows = []
    for n in PREFIXES:
        prompt = torch.randint(256, (1, n), generator=torch.Generator().manual_seed(n))
        times = {True: [], False: []}
        outputs = {}
        for _ in range(repeats):
            for use_cache in (True, False):
                start = time.perf_counter()
                outputs[use_cache] = mha.generate(model, prompt, new, use_cache=use_cache)
                times[use_cache].append(time.perf_counter() - start)
        if not torch.equal(outputs[True], outputs[False]):
            raise AssertionError(f"cached and recomputed generation differ at n = {n}")
        cached = new / statistics.median(times[True])
        recomputed = new / statistics.median(times[False])
        rows.append({"prefix": n, "tokens_per_s_cache": round(cached, 1),
                     "tokens_per_s_recompute": round(recomputed, 1),
                     "speedup": round(cached / recomputed, 2)})
        print(rows[-1], flush=True)
    return rows


def cache_sizes(n: int = 512) -> list[dict]:
    head_dim = EMBED_DIM // HEADS
    variants = [("multi-head", {"num_kv_heads": 8}), ("grouped-query (2)", {"num_kv_heads": 2}),
                ("multi-query", {"num_kv_heads": 1}),
                ("latent (d_c=32, d_R=4)", {"latent_dim": 32, "rope_dim": 4})]
    rows = []
    for name, attention in variants:
        model = decoder(n, **attention)
        caches = model.new_caches()
        with torch.no_grad():
            model(torch.randint(256, (1, n)), caches=caches)
        measured = sum(cache.nbytes for cache in caches)
        if "latent_dim" in attention:
            formula = LAYERS * (attention["latent_dim"] + attention["rope_dim"]) * n * 4
        else:
            formula = mha.analysis.cost.kv_cache_bytes(LAYERS, attention["num_kv_heads"],
                                                       head_dim, n)
        rows.append({"attention": name, "tokens": n, "cache_bytes": measured,
                     "formula_bytes": formula})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new", type=int, default=32, help="tokens generated per run")
    parser.add_argument("--out", help="write the speed table to this CSV file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = speed(args.repeats, args.new)
    cache_sizes()
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
