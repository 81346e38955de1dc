"""Time every multi-head attention path against PyTorch's own, forward and forward + backward.

    .venv/bin/python benchmarks/attention_speed.py [--threads 1 2] [--rounds 20] [--memory]
        [--out src/mha/data/attention_speed.csv]

Each row pairs one way of computing multi-head attention with the ``nn.MultiheadAttention`` call
that does the same work, on the same input and the same weights:

- ``weights``: ``mha.MultiHeadAttention`` returning the per-head weights, against
  ``nn.MultiheadAttention(need_weights=True, average_attn_weights=False)``;
- ``weights, causal mask``: the same with an explicit ``(n, n)`` causal mask;
- ``weights, is_causal``: the course's ``is_causal=True`` (no mask passed), against the mask;
- ``fused``: ``need_weights=False`` (``scaled_dot_product_attention``), against
  ``nn.MultiheadAttention(need_weights=False)``;
- ``fused, is_causal``: the fused causal kernel, against ``nn.MultiheadAttention``'s
  ``is_causal`` hint;
- three layers of the kinds learners write when following the usual courses, written here for
  the comparison: ``learner: loop of heads`` (h single heads, concatenated), ``learner: one
  softmax`` (one projection per Q, K, V reshaped into heads, an explicit softmax) and
  ``learner: fused`` (one projection for Q, K, V together, then ``scaled_dot_product_attention``);
  each against the ``nn.MultiheadAttention`` call that returns the same things.

A round runs the two sides of a pair in turn, so a noisy neighbour slows both alike; the table
reports, per pair, the median over rounds of the ratio ours / PyTorch (and its range), and the
median milliseconds of each side. ``--memory`` adds, per pair, the bytes autograd saves for the
backward pass (exact) and the peak resident memory of a forward and backward pass, each side in
a fresh process. A script, not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import mha

SIZES = [  # (batch, tokens, embed_dim, heads)
    (8, 128, 256, 8),
    (2, 1024, 512, 8),
    (32, 64, 128, 4),
]


class LoopOfHeads(nn.Module):
    """h separate single heads, each with its own three projections, concatenated, then W_O."""

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


class OneSoftmax(nn.Module):
    """Q, K, V projections reshaped into heads, then scores, softmax and weights written out."""

    def __init__(self, layer: mha.MultiHeadAttention) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, (b, n, d) = self.layer, x.shape
        h, dk = m.num_heads, m.head_dim
        q = m.q_proj(x).view(b, n, h, dk).transpose(1, 2)  # (B, h, n, d_k)
        k = m.k_proj(x).view(b, n, h, dk).transpose(1, 2)  # (B, h, n, d_k)
        v = m.v_proj(x).view(b, n, h, dk).transpose(1, 2)  # (B, h, n, d_k)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dk), dim=-1)  # (B, h, n, n)
        return m.out_proj((weights @ v).transpose(1, 2).reshape(b, n, d))


class FusedQKV(nn.Module):
    """One projection for Q, K and V together, then PyTorch's fused attention."""

    def __init__(self, layer: mha.MultiHeadAttention) -> None:
        super().__init__()
        self.qkv = nn.Linear(layer.embed_dim, 3 * layer.embed_dim)
        with torch.no_grad():
            self.qkv.weight.copy_(torch.cat([p.weight for p in (layer.q_proj, layer.k_proj,
                                                                layer.v_proj)]))
            self.qkv.bias.copy_(torch.cat([p.bias for p in (layer.q_proj, layer.k_proj,
                                                            layer.v_proj)]))
        self.heads, self.out_proj = layer.num_heads, layer.out_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2)  # (B, h, n, d_k)
                   for t in self.qkv(x).split(d, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v)  # (B, h, n, d_k)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))


Pair = tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


def pairs(embed_dim: int, heads: int, tokens: int) -> dict[str, Pair]:
    """Path name -> (ours, PyTorch's call doing the same work), each mapping x to the output."""
    torch.manual_seed(0)
    torch_layer = nn.MultiheadAttention(embed_dim, heads, batch_first=True)
    ours = mha.MultiHeadAttention.from_torch(torch_layer)
    allowed = torch.ones(tokens, tokens, dtype=torch.bool).tril()

    def theirs(**kwargs):
        return lambda x: torch_layer(x, x, x, **kwargs)[0]

    with_weights = theirs(need_weights=True, average_attn_weights=False)
    causal_weights = theirs(need_weights=True, average_attn_weights=False, attn_mask=~allowed)
    learners = LoopOfHeads(ours), OneSoftmax(ours), FusedQKV(ours)
    return {
        "weights": (lambda x: ours(x)[0], with_weights),
        "weights, causal mask": (lambda x: ours(x, mask=allowed)[0], causal_weights),
        "weights, is_causal": (lambda x: ours(x, is_causal=True)[0], causal_weights),
        "fused": (lambda x: ours(x, need_weights=False)[0], theirs(need_weights=False)),
        "fused, is_causal": (lambda x: ours(x, is_causal=True, need_weights=False)[0],
                             theirs(need_weights=False, attn_mask=~allowed, is_causal=True)),
        "learner: loop of heads": (learners[0], with_weights),
        "learner: one softmax": (learners[1], with_weights),
        "learner: fused": (learners[2], theirs(need_weights=False)),
    }


def run_once(fn: Callable, x: torch.Tensor, backward: bool) -> float:
    start = time.perf_counter()
    out = fn(x)
    if backward:
        out.sum().backward()
    return time.perf_counter() - start


def time_pair(pair: Pair, x: torch.Tensor, backward: bool, rounds: int) -> dict:
    ours, theirs = pair
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-4, rtol=1e-4)  # the same function
    for fn in pair:  # warm up
        for _ in range(2):
            run_once(fn, x, backward)
    times = [(run_once(ours, x, backward), run_once(theirs, x, backward)) for _ in range(rounds)]
    ratios = [a / b for a, b in times]
    return {"ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "ours_ms": 1e3 * statistics.median(a for a, _ in times),
            "torch_ms": 1e3 * statistics.median(b for _, b in times)}


def saved_bytes(fn: Callable, x: torch.Tensor) -> int:
    """Bytes of the distinct tensors autograd keeps for the backward pass of ``fn(x)``."""
    seen = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(seen.values())


def peak_memory(path: str, side: int, size: tuple[int, ...]) -> int:
    """Peak resident bytes of one forward and backward pass, in a fresh process (Linux)."""
    command = [sys.executable, __file__, "--peak-of", json.dumps([path, side, list(size)])]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def _peak_of(spec: str) -> None:
    """The child of ``peak_memory``: build the pair, reset the high-water mark, run, report."""
    path, side, (b, n, d, h) = json.loads(spec)
    torch.set_num_threads(1)
    fn = pairs(d, h, n)[path][side]
    x = torch.randn(b, n, d, requires_grad=True)
    fn(torch.randn(1, n, d, requires_grad=True)).sum().backward()  # one-off allocations
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident size
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    before = int(status["VmRSS"].split()[0])
    fn(x).sum().backward()
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    print((int(status["VmHWM"].split()[0]) - before) * 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--memory", action="store_true", help="also measure memory per pair")
    parser.add_argument("--out", default=None, help="append the rows to this CSV file")
    parser.add_argument("--peak-of", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_of:
        return _peak_of(args.peak_of)

    run = time.strftime("%Y-%m-%dT%H:%M:%S")
    rows = []
    print(f"torch {torch.__version__}; median over {args.rounds} rounds of ours / PyTorch")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for size in SIZES:
            b, n, d, h = size
            x = torch.randn(b, n, d, generator=torch.Generator().manual_seed(1),
                            requires_grad=True)
            for path, pair in pairs(d, h, n).items():
                for backward in (False, True):
                    row = {"run": run, "threads": threads, "batch": b, "tokens": n,
                           "embed_dim": d, "heads": h, "path": path,
                           "pass": "forward+backward" if backward else "forward",
                           **time_pair(pair, x, backward, args.rounds)}
                    if args.memory and backward and threads == args.threads[0]:
                        row["saved_ratio"] = saved_bytes(pair[0], x) / saved_bytes(pair[1], x)
                        row["peak_ratio"] = (peak_memory(path, 0, size)
                                             / peak_memory(path, 1, size))
                    rows.append(row)
                    extra = (f"  saved {row['saved_ratio']:.2f}  peak {row['peak_ratio']:.2f}"
                             if "saved_ratio" in row else "")
                    print(f"{threads}t B{b:<2} n{n:<4} d{d:<3} h{h} {path:24} "
                          f"{row['pass']:16} {row['ratio']:.3f} ({row['ratio_min']:.2f}-"
                          f"{row['ratio_max']:.2f})  {row['ours_ms']:8.2f} ms vs "
                          f"{row['torch_ms']:8.2f} ms{extra}", flush=True)
    if args.out:
        fields = ["run", "threads", "batch", "tokens", "embed_dim", "heads", "path", "pass",
                  "ratio", "ratio_min", "ratio_max", "ours_ms", "torch_ms", "saved_ratio",
                  "peak_ratio"]
        out = Path(args.out)
        new = not out.exists()
        with out.open("a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            if new:
                writer.writeheader()
            for row in rows:
                writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v)
                                 for k, v in row.items()})


if __name__ == "__main__":
    main()
