"""Names a student chose, shown to the instructor: escaped for a terminal and a spreadsheet."""

from __future__ import annotations

import unicodedata

# ---------------------------------------------------------------------------------------------
# Names a student chose, shown to the instructor: in a terminal and in a spreadsheet

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")  # OWASP's list, and the quote itself


def display(name: str) -> str:
    """``name`` with every character a terminal could act on escaped (one to one, so names stay
    apart): control characters, bidi overrides, other invisible format characters, and the bytes
    of a file name that is not UTF-8 (``os`` hands them over as lone surrogates) as ``\\xNN``;
    the backslash itself doubled."""
    out = []
    for char in name:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, kept by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char == "\\":
            out.append("\\\\")
        elif char in BIDI or unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn",
                                                            "Zl", "Zp"):
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def terminal(text: str) -> str:
    """A line for the terminal: whatever ``display`` missed (messages, problems) made inert."""
    return "".join(c if c.isprintable() and c not in BIDI else f"\\u{ord(c):04x}"
                   for c in text)


def cell(value: object) -> object:
    """A CSV field a spreadsheet shows as text, never runs as a formula (OWASP's CSV injection
    advice: a field starting with = + - @ tab or CR gets a leading quote; so does one starting
    with a quote, so that the change is one to one)."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value

