"""Decoding speed: compiled ``mha`` against eager ``mha`` and against ``nn.MultiheadAttention``.

    .venv/bin/python benchmarks/compiled_decoding.py [--threads 1] [--repeats 5] [--new 64]
                                                     [--backend inductor] [--out FILE]

A decoder with chapter 9's sizes (``d = 64``, 8 heads, 2 layers, MLP 128; untrained: speed
does not depend on the weights) extends a random prompt of ``--prompt`` bytes by ``--new``
tokens, greedily, three ways, which take turns within every repeat (so a busy machine slows
all alike):

- ``eager``: :class:`mha.TinyDecoder` with a :class:`mha.KVCache` per layer, one token per
  step (what :func:`mha.generate` does);
- ``compiled``: the same step through ``torch.compile(model, fullgraph=True)`` (the prompt
  goes through the eager model: caches made there mark their length dynamic), so the step
  compiles once for every length (the script checks that it compiled exactly one graph and
  never recompiled). The compilation itself is timed apart;
- ``torch``: the same weights in ``nn.MultiheadAttention`` (``to_torch()``), which has no KV
  cache: each layer keeps the inputs it has seen and recomputes their keys and values at
  every step (the best torch's module's API allows).

All three must produce the same tokens, which the script checks. It reports the median
tokens per second of the decode steps (the prompt's pass excluded) and writes them as CSV.
This is a script, not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time

import torch
from torch._dynamo.testing import CompileCounterWithBackend

import mha

EMBED_DIM, HEADS, LAYERS, MLP = 64, 8, 2, 128


class TorchAttentionDecoder:
    """``model``'s blocks with ``nn.MultiheadAttention`` (same weights): a cache of each
    layer's normalised inputs, whose keys and values are recomputed at every step."""

    def __init__(self, model: mha.TinyDecoder) -> None:
        self.model = model
        self.attention = [block.attn.to_torch().eval() for block in model.blocks]

    def __call__(self, tokens: torch.Tensor, inputs: list) -> torch.Tensor:
        """Logits ``(B, n, V)`` of ``tokens`` ``(B, n)`` after the ``inputs`` kept so far."""
        model = self.model
        past, n = inputs[0].shape[1] if inputs[0] is not None else 0, tokens.shape[1]
        x = model.token_embedding(tokens) + model.position_embedding[past:past + n]
        # torch's bool mask: True = may NOT attend; new query i sees keys 0 .. past + i
        future = torch.ones(n, past + n, dtype=torch.bool).triu(diagonal=past + 1)
        for layer, (block, attention) in enumerate(zip(model.blocks, self.attention,
                                                       strict=True)):
            h = block.norm1(x)  # (B, n, d)
            seen = h if inputs[layer] is None else torch.cat([inputs[layer], h], dim=1)
            inputs[layer] = seen  # (B, past + n, d)
            attended, _ = attention(h, seen, seen, attn_mask=future, need_weights=False)
            x = x + attended
            x = x + block.mlp(block.norm2(x))
        return model.norm(x) @ model.token_embedding.weight.T


def decode(step, prompt: torch.Tensor, new: int, state: list,
           first=None) -> tuple[torch.Tensor, float]:
    """Greedy decoding: the prompt through ``first`` (default ``step``) once, then ``new``
    single tokens through ``step``. Returns the tokens and the seconds the steps took."""
    tokens = [prompt]
    logits = (first or step)(prompt, state)[:, -1]
    start = time.perf_counter()
    for _ in range(new):
        tokens.append(logits.argmax(dim=-1, keepdim=True))  # (B, 1)
        logits = step(tokens[-1], state)[:, -1]
    return torch.cat(tokens, dim=1), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--out", default="benchmarks/compiled_decoding.csv")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = mha.TinyDecoder(256, args.prompt + args.new + 1, embed_dim=EMBED_DIM,
                            num_heads=HEADS, num_layers=LAYERS, mlp_dim=MLP).eval()
    prompt = torch.randint(256, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    counter = CompileCounterWithBackend(args.backend)
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    ways = {
        "eager": lambda: decode(lambda t, c: model(t, caches=c), prompt, args.new,
                                model.new_caches()),
        # the prompt eagerly: its caches then mark their length dynamic (caches made inside
        # compiled code cannot), so the step compiles once for every length
        "compiled": lambda: decode(lambda t, c: compiled(t, caches=c), prompt, args.new,
                                   model.new_caches(), first=lambda t, c: model(t, caches=c)),
        "torch": lambda: decode(TorchAttentionDecoder(model), prompt, args.new,
                                [None] * LAYERS),
    }
    with torch.no_grad():
        start = time.perf_counter()
        ways["compiled"]()  # the first run compiles the step
        compile_seconds = time.perf_counter() - start
        graphs_after_warmup = counter.frame_count
        times = {name: [] for name in ways}
        outputs = {}
        for _ in range(args.repeats):
            for name, run in ways.items():
                outputs[name], seconds = run()
                times[name].append(seconds)
    reference = mha.generate(model, prompt, args.new)
    for name, tokens in outputs.items():
        if not torch.equal(tokens, reference):
            raise AssertionError(f"{name} decoding differs from mha.generate")
    if graphs_after_warmup != 1 or counter.frame_count != 1:
        raise AssertionError(f"compiled decoding made {graphs_after_warmup} graphs in its "
                             f"first run and {counter.frame_count} in all, not 1")
    rows = [{"way": name, "tokens_per_second": round(args.new / statistics.median(t), 1)}
            for name, t in times.items()]
    print(f"torch {torch.__version__}, {args.threads} thread(s), backend {args.backend}, "
          f"prompt {args.prompt}, {args.new} new tokens, median of {args.repeats}")
    print(f"first compiled run (compiling {graphs_after_warmup} graph): {compile_seconds:.1f} "
          f"s; no recompilation in the timed runs")
    for row in rows:
        print(f"{row['way']:>9}: {row['tokens_per_second']:8.1f} tokens/s")
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["way", "tokens_per_second"])
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
