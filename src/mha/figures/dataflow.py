r"""The course's two data-flow pictures, drawn with :mod:`mha.diagrams` from the notation.

- :func:`scaled_dot_product_figure`: $\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V$ step by step;
- :func:`multi_head_figure`: projections, split into heads, attention per head, concatenation,
  $W_O$.

Every arrow carries its tensor's shape in the symbols of a :class:`~mha.diagrams.Notation`, so a
change of notation redraws the figures, and ``tests/test_dataflow.py`` checks those shapes
against the ones :class:`mha.MultiHeadAttention` really produces. ``*_figure`` returns the
matplotlib figure; ``*_diagram`` returns the :class:`~mha.diagrams.Diagram`, whose
``alt_text()`` describes it in words (for the image's alt text) and which a chapter can extend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mha._validation import require_flag
from mha.diagrams import COURSE, Diagram, Notation, math_symbol

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _require_notation(notation: object) -> Notation:
    if not isinstance(notation, Notation):
        raise ValueError(f"notation must be an mha.Notation, got {type(notation).__name__}")
    return notation


def scaled_dot_product_diagram(notation: Notation = COURSE, *, heads: bool = False,
                               mask: bool = True) -> Diagram:
    r"""Scaled dot-product attention: $A = \mathrm{softmax}(QK^\top/\sqrt{d_k})$, output $AV$.

    Shapes ``(B, n_q, d_k)`` for ``Q``, ``(B, n_k, d_k)`` for ``K``, ``(B, n_k, d_v)`` for
    ``V``; with ``heads=True`` every shape has the head axis after the batch, ``(B, h, ...)``,
    as inside multi-head attention. ``mask=False`` leaves out the optional mask step.

    Raises ``ValueError`` naming ``notation`` (not a :class:`mha.Notation`), ``heads`` or
    ``mask`` (not a bool).
    """
    s = _require_notation(notation)
    heads, mask = require_flag("heads", heads), require_flag("mask", mask)
    lead = (s.batch, s.heads) if heads else (s.batch,)
    d = Diagram("Scaled dot-product attention" + (", every head at once" if heads else ""))
    q = d.box("$Q$", (0, 7), kind="tensor", width=1.2)
    k = d.box("$K$", (3, 7), kind="tensor", width=1.2)
    v = d.box("$V$", (6.5, 7), kind="tensor", width=1.2)
    scores = d.box(r"$Q K^\top$", (1.5, 5.6), width=3.6)
    scaled = d.box(rf"$\div\,\sqrt{{{math_symbol(s.key)}}}$", (1.5, 4.4))
    d.arrow(q, scores, (*lead, s.queries, s.key), name="Q", label_side="left")
    d.arrow(k, scores, (*lead, s.keys, s.key), name="K")
    d.arrow(scores, scaled, (*lead, s.queries, s.keys), name="S")
    last = scaled
    if mask:
        masked = d.box("mask (optional)", (1.5, 3.2), width=2.3)
        d.arrow(scaled, masked, (*lead, s.queries, s.keys), name="S")
        last = masked
    soft = d.box("softmax over keys", (1.5, 2.0), width=2.7)
    d.arrow(last, soft, (*lead, s.queries, s.keys), name="S")
    mix = d.box("$A V$", (1.5, 0.8))
    d.arrow(soft, mix, (*lead, s.queries, s.keys), name="A")
    d.arrow(v, mix, (*lead, s.keys, s.value), name="V", via=[(6.5, 0.8)])
    out = d.box("output", (1.5, -0.6), kind="tensor")
    d.arrow(mix, out, (*lead, s.queries, s.value))
    return d


def multi_head_diagram(notation: Notation = COURSE, *, weights: bool = True) -> Diagram:
    r"""Multi-head attention on one input $X$ (self-attention), shape by shape.

    $X$ ``(B, n, d)`` is projected by $W_Q, W_K, W_V$ to ``(B, n, h*d_k)`` (values
    ``h*d_v``), split into heads ``(B, h, n, d_k)``, attended per head to ``(B, h, n, d_v)``,
    concatenated back to ``(B, n, h*d_v)`` and projected by $W_O$ to ``(B, n, d)``. With
    ``weights=True`` the attention weights ``(B, h, n, n)`` leave as a side output.

    Raises ``ValueError`` naming ``notation`` (not a :class:`mha.Notation`) or ``weights`` (not
    a bool).
    """
    notation, weights = _require_notation(notation), require_flag("weights", weights)
    s = notation
    d = Diagram("Multi-head attention")
    x = d.box("input $X$", (3.5, 9.6), kind="tensor")
    attend = d.box("scaled dot-product attention, each head", (3.5, 4.6), width=9.0,
                   height=0.8, stack=3)
    for col, (name, dim) in enumerate(zip("QKV", (s.key, s.key, s.value), strict=True)):
        p = d.box(f"$W_{name}$", (3.5 * col, 8.0), width=1.2)
        d.arrow(x, p, (s.batch, s.tokens, s.width), label_side="left" if col == 0 else "right")
        split = d.box("split heads", (3.5 * col, 6.4))
        d.arrow(p, split, (s.batch, s.tokens, s.times(s.heads, dim)))
        d.arrow(split, attend, (s.batch, s.heads, s.tokens, dim), name=name)
    concat = d.box("concatenate heads", (3.5, 2.8), width=2.7)
    d.arrow(attend, concat, (s.batch, s.heads, s.tokens, s.value))
    w_o = d.box("$W_O$", (3.5, 1.4), width=1.2)
    d.arrow(concat, w_o, (s.batch, s.tokens, s.times(s.heads, s.value)))
    out = d.box("output", (3.5, 0), kind="tensor")
    d.arrow(w_o, out, (s.batch, s.tokens, s.width))
    if weights:
        a = d.box("weights $A$", (7.0, 2.8), kind="tensor", width=1.9)
        d.arrow(attend, a, (s.batch, s.heads, s.tokens, s.tokens))
    return d


def scaled_dot_product_figure(notation: Notation = COURSE, *, heads: bool = False,
                              mask: bool = True) -> Figure:
    """:func:`scaled_dot_product_diagram` drawn: a matplotlib figure at book width.

    Raises ``ValueError`` as :func:`scaled_dot_product_diagram` does."""
    return scaled_dot_product_diagram(notation, heads=heads, mask=mask).figure()


def multi_head_figure(notation: Notation = COURSE, *, weights: bool = True) -> Figure:
    """:func:`multi_head_diagram` drawn: a matplotlib figure at book width.

    Raises ``ValueError`` as :func:`multi_head_diagram` does."""
    return multi_head_diagram(notation, weights=weights).figure()
