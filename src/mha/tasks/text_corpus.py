"""Real text for a byte-level model: the topics of the Python Language Reference, as bytes.

Every Python installation carries the text of the Language Reference's topics in the standard
library module ``pydoc_data.topics`` (it is what ``help("assert")`` shows): about half a
million characters of English prose and code. That text changes from one Python version to the
next (466,195 bytes on 3.11, 493,422 on 3.12, 511,869 on 3.13), and every loss a model trains
to on it with it, so the package ships the text of Python 3.11.7 (``data/python_reference.txt.gz``,
under the PSF License, ``data/python_reference.LICENSE.txt``): chapter 9 prints the same
numbers on every Python, offline.
"""

from __future__ import annotations

import gzip
from importlib import resources

import torch

from mha._validation import (
    check_allocation,
    require_generator,
    require_int,
    require_int_tensor,
    require_number,
)

#: A byte-level model reads and writes the 256 possible byte values.
VOCAB_SIZE = 256


#: The shipped text (gzip of UTF-8), read as bytes: no newline translation on any platform.
CORPUS_FILE = "python_reference.txt.gz"


def reference_text() -> str:
    """The topics of Python 3.11.7's Language Reference (``pydoc_data.topics``), in alphabetical
    order, joined by newlines: the same 466,195 bytes of UTF-8 on every Python version."""
    packed = resources.files("mha").joinpath("data", CORPUS_FILE).read_bytes()
    return gzip.decompress(packed).decode("utf-8")


def encode(text: str) -> torch.Tensor:
    """The UTF-8 bytes of ``text`` as a ``(n,)`` int64 tensor of values ``0..255``."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(tokens: torch.Tensor) -> str:
    """The text whose UTF-8 bytes are ``tokens`` (an invalid byte sequence shows as U+FFFD)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point() \
            or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be a 1-D integer tensor, got "
                         f"{getattr(tokens, 'dtype', type(tokens).__name__)} of shape "
                         f"{tuple(getattr(tokens, 'shape', ()))}")
    if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < VOCAB_SIZE:
        raise ValueError("tokens must be byte values in 0..255")
    return bytes(tokens.tolist()).decode("utf-8", errors="replace")


def windows(
    data: torch.Tensor, batch_size: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``data`` and the same windows shifted by one token.

    Returns ``(inputs, targets)``, both ``(batch_size, length)``, with
    ``targets[b, i] = inputs[b, i + 1]`` inside the text: the next-token targets of a
    language model, for every position at once.

    ``data``: 1-D integer token ids; both results have its dtype. Raises ``ValueError`` naming
    ``data`` (not a 1-D integer tensor, or shorter than ``length + 1``), ``batch_size``,
    ``length`` or ``generator`` (not a ``torch.Generator``, ``None`` too, as
    :func:`mha.tasks.neighbour_task.lookup_batch`); :class:`mha.MemoryBudgetError` when the
    windows would exceed the memory budget.
    """
    if not isinstance(data, torch.Tensor) or data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of tokens, got "
                         f"{tuple(getattr(data, 'shape', ()))}")
    require_int_tensor("data", data)  # float "tokens" would make float targets
    require_generator("generator", generator, required=True)  # else randint names neither
    # any integer (numpy's too, as translation_batch and bits_per_byte take), never a bool
    batch_size, length = require_int("batch_size", batch_size), require_int("length", length)
    check_allocation("windows", (batch_size, length + 1), torch.int64,
                     f"use a smaller batch_size ({batch_size}) or length ({length})")
    if length + 1 > data.numel():
        raise ValueError(f"length={length} needs at least {length + 1} tokens, data has "
                         f"{data.numel()}")
    starts = torch.randint(data.numel() - length, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(length + 1)  # (B, length + 1)
    chunk = data[index]
    return chunk[:, :-1], chunk[:, 1:]


def text_splits(fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference text as bytes, split into a training part (the first ``fraction``) and a
    held-out part (the rest), both 1-D int64 tensors.

    Raises ``ValueError`` naming ``fraction`` outside ``(0, 1)``."""
    fraction = require_number("fraction", fraction)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie strictly between 0 and 1, got {fraction!r}")
    data = encode(reference_text())
    split = int(fraction * data.numel())
    return data[:split], data[split:]
