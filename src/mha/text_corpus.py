"""Real text that ships with Python: the language reference, as bytes for a byte-level model.

Every Python installation carries the text of the Python Language Reference's topics in the
standard library module ``pydoc_data.topics`` (it is what ``help("assert")`` shows). It is
about half a million characters of English prose and code, available offline, so a chapter
can train a small language model on real text without downloading anything. The text differs
a little between Python versions, so numbers computed from it do too.
"""

from __future__ import annotations

import torch

#: A byte-level model reads and writes the 256 possible byte values.
VOCAB_SIZE = 256


def reference_text() -> str:
    """The topics of the Python Language Reference, in alphabetical order, joined by newlines."""
    from pydoc_data.topics import topics  # standard library: nothing to download

    return "\n".join(topics[name] for name in sorted(topics))


def encode(text: str) -> torch.Tensor:
    """The UTF-8 bytes of ``text`` as a ``(n,)`` int64 tensor of values ``0..255``."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(tokens: torch.Tensor) -> str:
    """The text whose UTF-8 bytes are ``tokens`` (an invalid byte sequence shows as U+FFFD)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point():
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
    """
    if not isinstance(data, torch.Tensor) or data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of tokens, got "
                         f"{tuple(getattr(data, 'shape', ()))}")
    for name, value in [("batch_size", batch_size), ("length", length)]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if length + 1 > data.numel():
        raise ValueError(f"length={length} needs at least {length + 1} tokens, data has "
                         f"{data.numel()}")
    starts = torch.randint(data.numel() - length, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(length + 1)  # (B, length + 1)
    chunk = data[index]
    return chunk[:, :-1], chunk[:, 1:]


def text_splits(fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference text as bytes, split into a training part (the first ``fraction``) and a
    held-out part (the rest), both 1-D int64 tensors."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie strictly between 0 and 1, got {fraction!r}")
    data = encode(reference_text())
    split = int(fraction * data.numel())
    return data[:split], data[split:]
