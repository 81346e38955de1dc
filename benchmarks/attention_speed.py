"""Time four multi-head attention implementations side by side, forward and backward, on CPU.

    .venv/bin/python benchmarks/attention_speed.py [--threads 1] [--repeats 30] [--out FILE]

The four, on the same input and the same weights:

- ``explicit``: ``mha.MultiHeadAttention`` with ``need_weights=True`` (scores, softmax, weights);
- ``fast``: the same module with ``need_weights=False`` (PyTorch's fused
  ``scaled_dot_product_attention``);
- ``torch``: ``nn.MultiheadAttention(batch_first=True)`` with ``need_weights=False``;
- ``loop``: h separate single heads (``mha.SelfAttention``), concatenated, then ``W_O``.

One "run" is a forward pass and a backward pass of ``output.sum()``. The implementations take
turns inside every repeat (so a noisy neighbour slows all of them alike), and the table
reports the median time of each and the median of the per-repeat ratio fast / torch.
This is a script, not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import mha

SIZES = [  # (batch, tokens, embed_dim, heads)
    (8, 64, 64, 4),
    (8, 128, 128, 8),
    (4, 256, 256, 8),
    (2, 512, 256, 8),
]


class LoopOfHeads(nn.Module):
    """h separate ``mha.SelfAttention`` heads, concatenated, then the output projection."""

    def __init__(self, layer: mha.MultiHeadAttention) -> None:
        super().__init__()
        d, h, dk = layer.embed_dim, layer.num_heads, layer.head_dim
        self.heads = nn.ModuleList(mha.SelfAttention(d, dk, dk, bias=True) for _ in range(h))
        with torch.no_grad():  # the same weights as `layer`, head by head
            for i, head in enumerate(self.heads):
                rows = slice(i * dk, (i + 1) * dk)
                for mine, theirs in [(head.w_q, layer.q_proj), (head.w_k, layer.k_proj),
                                     (head.w_v, layer.v_proj)]:
                    mine.weight.copy_(theirs.weight[rows])
                    mine.bias.copy_(theirs.bias[rows])
        self.out_proj = layer.out_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.cat([head(x)[0] for head in self.heads], dim=-1))


def implementations(embed_dim: int, heads: int) -> dict:
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(embed_dim, heads, batch_first=True)
    ours = mha.MultiHeadAttention.from_torch(reference)
    loop = LoopOfHeads(ours)
    return {
        "explicit": lambda x: ours(x, need_weights=True)[0],
        "fast": lambda x: ours(x, need_weights=False)[0],
        "torch": lambda x: reference(x, x, x, need_weights=False)[0],
        "loop": loop,
    }


def time_once(fn, x: torch.Tensor) -> float:
    start = time.perf_counter()
    fn(x).sum().backward()
    return time.perf_counter() - start


def measure(size, repeats: int) -> dict:
    batch, tokens, embed_dim, heads = size
    fns = implementations(embed_dim, heads)
    x = torch.randn(batch, tokens, embed_dim, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    outputs = [fn(x) for fn in fns.values()]  # the four compute the same function
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], atol=1e-4, rtol=1e-4)
    for fn in fns.values():  # warm up
        for _ in range(3):
            time_once(fn, x)
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(time_once(fn, x))
    row = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    row["ratio"] = statistics.median(f / t for f, t in zip(times["fast"], times["torch"],
                                                            strict=True))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=None, help="also write the table (CSV) here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    header = "batch,tokens,embed_dim,heads,explicit_ms,fast_ms,torch_ms,loop_ms,fast_over_torch"
    lines = [header]
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.repeats} repeats, "
          f"median ms per forward + backward")
    print(f"{'B':>3} {'n':>4} {'d':>4} {'h':>2} | {'explicit':>9} {'fast':>9} {'torch':>9} "
          f"{'loop':>9} | fast/torch")
    for size in SIZES:
        row = measure(size, args.repeats)
        b, n, d, h = size
        print(f"{b:>3} {n:>4} {d:>4} {h:>2} | {row['explicit']:9.3f} {row['fast']:9.3f} "
              f"{row['torch']:9.3f} {row['loop']:9.3f} | {row['ratio']:.3f}")
        lines.append(f"{b},{n},{d},{h},{row['explicit']:.3f},{row['fast']:.3f},"
                     f"{row['torch']:.3f},{row['loop']:.3f},{row['ratio']:.3f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
