"""What a computation costs, measured on this machine: wall time and peak memory.

The results depend on the machine and on what else runs on it; compare them with each other
(ratios, slopes), never with fixed numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from mha._validation import (
    check_allocation,
    require_callable,
    require_choice,
    require_int,
    require_values,
)

#: The attention implementations ``peak_memory`` can run.
METHODS = ("plain", "chunked", "fused")

# One fresh Python process imports PyTorch once, then forks a new child for every measurement:
# each call runs in a process of its own, which no earlier call has left freed memory to reuse
# (freed memory stays resident, so a second call in the same process can look free). On Linux
# the child resets its peak resident set size (VmHWM) just before the call (write "5" to
# /proc/self/clear_refs); elsewhere ru_maxrss, a high-water mark over the child's life, is the
# best there is. Windows has no fork: there every measurement gets a fresh Python process of its
# own (slower: each imports PyTorch), and the peak working set stands in for the peak RSS.
_FORK = hasattr(os, "fork")

_MEMORY_SCRIPT = """
import ctypes, os, sys
import torch
import mha

methods, d, chunk = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
fork = sys.argv[4] == "fork"
sizes = [int(n) for n in sys.argv[5:]]
torch.set_num_threads(1)
LINUX = os.path.exists("/proc/self/clear_refs")
WINDOWS = sys.platform == "win32"
if WINDOWS:
    from ctypes import wintypes

    class Counters(ctypes.Structure):  # PROCESS_MEMORY_COUNTERS
        _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD)] + [
            (name, ctypes.c_size_t) for name in (
                "PeakWorkingSetSize", "WorkingSetSize", "QuotaPeakPagedPoolUsage",
                "QuotaPagedPoolUsage", "QuotaPeakNonPagedPoolUsage", "QuotaNonPagedPoolUsage",
                "PagefileUsage", "PeakPagefileUsage")]

    kernel32 = ctypes.WinDLL("kernel32")
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    kernel32.K32GetProcessMemoryInfo.argtypes = [wintypes.HANDLE, ctypes.POINTER(Counters),
                                                 wintypes.DWORD]
    kernel32.K32GetProcessMemoryInfo.restype = wintypes.BOOL

    def peak_working_set():
        counters = Counters()
        counters.cb = ctypes.sizeof(Counters)
        if not kernel32.K32GetProcessMemoryInfo(kernel32.GetCurrentProcess(),
                                                ctypes.byref(counters), counters.cb):
            raise OSError("GetProcessMemoryInfo failed")
        return counters.PeakWorkingSetSize
elif not LINUX:
    import resource


def status(field):
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024  # the kernel reports kB


def reset_peak():
    if LINUX:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status("VmRSS")
    if WINDOWS:
        return peak_working_set()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS


def peak():
    if LINUX:
        return status("VmHWM")
    if WINDOWS:
        return peak_working_set()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run(method, q, k, v):
    if method == "plain":
        # the formula as written: the (n, n) scores, then the (n, n) weights, then times V
        return torch.softmax(q @ k.transpose(-2, -1) / d**0.5, dim=-1) @ v
    if method == "fused":
        # PyTorch's fused kernel; it takes (B, h, n, d): on 3-D inputs the CPU build falls
        # back to its plain path, which forms the (n, n) matrix
        return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None])
    return mha.chunked_attention(q, k, v, chunk_size=chunk)


def measure(method, n):
    try:  # glibc: every block of 128 KiB or more is its own mapping, returned when freed
        ctypes.CDLL(None).mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except (AttributeError, OSError, TypeError):  # no mallopt: the allocator's own policy
        pass
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, d, generator=g) for _ in range(3))
    # warm up on one block of tokens: the kernels' one-off buffers are not the call's
    run(method, q[:, :chunk], k[:, :chunk], v[:, :chunk])
    before = reset_peak()
    run(method, q, k, v)
    return max(0, peak() - before)  # RSS can shrink during a call: no growth then


for method in methods:
    for n in sizes:
        if not fork:  # this process is the fresh one: measure, report, leave
            print(method, measure(method, n), flush=True)
            continue
        sys.stdout.flush()
        child = os.fork()
        if child == 0:  # a fresh process for this one call: measure, report, leave
            try:
                print(method, measure(method, n), flush=True)
            finally:
                os._exit(0)
        _, wait_status = os.waitpid(child, 0)
        if wait_status != 0:
            sys.exit(f"measuring {method} at n = {n} failed (wait status {wait_status})")
"""


def peak_memory(method: str, sizes: Sequence[int], d: int = 16,
                chunk_size: int = 1024) -> list[int]:
    """Bytes by which self-attention calls on ``(1, n, d)`` inputs raised peak memory.

    ``method``: ``"plain"`` is the formula ``softmax(Q K^T / sqrt(d)) V`` as written, which
    forms the ``(n, n)`` scores and then the ``(n, n)`` weights (:func:`mha.attention` computes
    the same, with a few more ``(n, n)`` temporaries for its masking guards); ``"chunked"`` is
    :func:`mha.chunked_attention` with blocks of ``chunk_size``; ``"fused"`` is PyTorch's
    ``scaled_dot_product_attention`` on ``(1, 1, n, d)`` inputs (its fused kernel). Entry
    ``i`` is measured for ``sizes[i]`` (increasing) as :func:`peak_memories` describes: in a
    process of its own.

    Raises ``ValueError`` as :func:`peak_memories` does, naming ``method`` when it is not one of
    ``METHODS``.
    """
    require_choice("method", method, METHODS)
    return peak_memories([method], sizes, d, chunk_size)[method]


def peak_memories(methods: Sequence[str], sizes: Sequence[int], d: int = 16,
                  chunk_size: int = 1024) -> dict[str, list[int]]:
    """:func:`peak_memory` for several methods at once: ``{method: [bytes for each n]}``.

    Every measurement runs in a process of its own: one fresh Python process imports PyTorch,
    then forks a new child for each method and each ``n`` in ``sizes``, so that no earlier
    call has left freed memory for this one to reuse. The child allocates the three
    ``(1, n, d)`` inputs, warms up on ``chunk_size`` tokens (the kernels' one-off buffers are
    not the call's), and reports how far its peak resident set size rose above its size just
    before the one call (Linux: ``VmHWM``, reset before the call). Elsewhere only
    ``ru_maxrss``, the peak over the child's life, exists: then the result is an upper bound.
    Windows has no ``os.fork``: there each measurement runs in a fresh Python process of its
    own and reports how far the peak working set rose during the call (slower, since every
    process imports PyTorch; a lower bound when an earlier peak of that process was higher).

    Raises ``ValueError`` naming ``methods`` (none, an unknown one, or one named twice),
    ``sizes`` (a non-empty increasing list of positive ints), ``d`` or ``chunk_size``;
    :class:`mha.MemoryBudgetError` when the inputs or the scores of a measurement would
    exceed the memory budget.
    """
    if isinstance(methods, str | bytes) or not isinstance(methods, Iterable):
        raise ValueError(f"methods must be a list of method names, got {type(methods).__name__}")
    methods = [require_choice("method", m, METHODS) for m in methods]
    if not methods:
        raise ValueError(f"methods must name at least one of {METHODS}, got none")
    # a method named twice was measured twice and its list held both runs, one after the other
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        raise ValueError(f"methods must name each method once, got {methods} with "
                         f"{', '.join(map(repr, repeated))} more than once")
    if isinstance(sizes, str | bytes) or not isinstance(sizes, Iterable):
        raise ValueError(f"sizes must be a list of ints, got {type(sizes).__name__}")
    sizes = [require_int(f"sizes[{i}]", n) for i, n in enumerate(sizes)]
    d, chunk_size = require_int("d", d), require_int("chunk_size", chunk_size)
    if not sizes or sizes != sorted(sizes):
        raise ValueError(f"sizes must be a non-empty increasing list, got {sizes}")
    # the child processes allocate these; refuse here what would take the machine down
    n = sizes[-1]
    check_allocation("peak_memory's inputs", (3, n, d), torch.float32,
                     f"use smaller sizes (largest {n}) or d ({d})")
    for method in methods:
        block = (n, n) if method == "plain" else (min(chunk_size, n),) * 2
        check_allocation(f"peak_memory({method!r})'s scores", block, torch.float32,
                         f"use smaller sizes (largest {n}) or a smaller chunk_size "
                         f"({chunk_size})")
    runs = ([(methods, sizes)] if _FORK  # one process, a forked child per measurement
            else [([m], [n]) for m in methods for n in sizes])  # a fresh process per measurement
    results: dict[str, list[int]] = {m: [] for m in methods}
    for run_methods, run_sizes in runs:
        done = subprocess.run(
            [sys.executable, "-c", _MEMORY_SCRIPT, ",".join(run_methods), str(d),
             str(chunk_size), "fork" if _FORK else "single", *map(str, run_sizes)],
            capture_output=True, text=True, check=True,
        )
        for line in done.stdout.splitlines():
            method, size = line.split()
            results[method].append(int(size))
    return results


def time_call(fn: Callable[[], object], repeats: int = 5) -> float:
    """The fastest of ``repeats`` wall-clock times of ``fn()``, in seconds (after one warm-up).

    The minimum is the least noisy estimate on a shared machine: other work only adds time.

    Raises ``ValueError`` naming ``fn`` (not callable) or ``repeats`` (not a positive int);
    whatever ``fn()`` raises passes through.
    """
    require_callable("fn", fn)
    require_int("repeats", repeats)
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def loglog_slope(sizes: object, values: object) -> float:
    """Least-squares slope of ``log(values)`` against ``log(sizes)``: ``values ~ sizes^slope``.

    Raises ``ValueError`` unless ``sizes`` and ``values`` are 1-D sequences of one length >= 2
    of positive finite numbers, with at least two different sizes."""
    for name, v in (("sizes", sizes), ("values", values)):
        if isinstance(v, torch.Tensor):
            require_values(name, v)  # meta: torch's "no data!" named neither (tester 49)
    try:
        x, y = (np.asarray(v.detach().cpu().double() if isinstance(v, torch.Tensor)
                           and v.is_floating_point() else v)  # bfloat16: no NumPy dtype
                for v in (sizes, values))
        if np.iscomplexobj(x) or np.iscomplexobj(y):  # NumPy would drop the imaginary part
            raise TypeError
        x, y = x.astype(float), y.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"sizes and values must be sequences of real numbers, got "
                         f"{type(sizes).__name__} and {type(values).__name__}") from None
    if x.ndim != 1 or y.ndim != 1 or len(x) < 2:
        raise ValueError(f"sizes and values must be 1-D sequences of length >= 2 (a slope "
                         f"needs two points), got sizes of shape {x.shape} and values "
                         f"of shape {y.shape}")
    if x.shape != y.shape:
        raise ValueError(f"sizes and values must have the same length (one value per size), "
                         f"got {len(x)} sizes and {len(y)} values")
    if not (np.all(np.isfinite(x) & (x > 0)) and np.all(np.isfinite(y) & (y > 0))):
        raise ValueError(f"sizes and values must be positive and finite, got {x} and {y}")
    if np.all(x == x[0]):  # one size: no slope (polyfit only warned and returned a number)
        raise ValueError(f"sizes must hold at least two different sizes (a slope needs two "
                         f"points apart), got {x}")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])
