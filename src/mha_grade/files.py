"""Reading and writing files without following what a student may have put in their place."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file, never following a symbolic link and never blocking on a FIFO
    that replaced it after it was found; ``ValueError`` otherwise, or if larger than ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise ValueError(f"cannot be read ({error.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file: not read")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit // 2**20} MB: not graded")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MB: not graded")
    return data


def create(path: Path, mode: int = 0o600):
    """A new, empty text file named ``path``, never written through what had that name: it is
    made under a fresh random name (``O_CREAT|O_EXCL|O_NOFOLLOW``, by ``mkstemp``) and renamed
    over ``path``, which replaces a symbolic link there rather than following it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        os.replace(tmp, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return os.fdopen(fd, "w", newline="", encoding="utf-8", errors="backslashreplace")

