"""Data-flow pictures: boxes for operations and tensors, arrows labelled with tensor shapes.

A chapter draws how its tensors flow in a few lines::

    d = Diagram()
    x = d.box("$X$", (0, 2), kind="tensor")
    q = d.box("$W_Q$", (0, 1))
    d.arrow(x, q, shape=("B", "n", "d"))
    fig = d.figure()

Coordinates are in box units (a box is 1.8 wide and 0.62 high by default), ``y`` grows upwards.
Shapes are written as the course's code comments write them, ``(B, h, n, d_k)``, in a monospace
font. The figure has an opaque white background, so it reads the same in the book's dark mode,
and :meth:`Diagram.alt_text` describes it in words for the image's alt text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from mha._validation import require_int, require_number, require_str

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn: `import mha` stays light
    from matplotlib.figure import Figure

#: fill and edge colours of each kind of box (light fills: black text reads on all of them)
KINDS = {
    "op": ("#fde9c9", "#b36b00"),      # an operation: a projection, softmax, a reshape
    "tensor": ("#dbe9f6", "#2b6699"),  # an input or output tensor
    "note": ("#ffffff", "#888888"),    # a side remark
}
#: inches per box unit: the same in every diagram, so all have the same font size
UNIT = 0.62
PAD = 0.2  # margin around everything, in box units
TITLE_BAND = 0.55  # height of the title, in box units
STACK_STEP = 0.1  # offset of each stacked copy, in box units
BOX_FONT = 12
SHAPE_FONT = 10
SHAPE_COLOUR = "#1a1a1a"


@dataclass(frozen=True)
class Notation:
    """The symbols the figures write in shapes; defaults are the course's (``book/notation.md``).

    Pass other strings to redraw a figure in another notation, or numbers (as strings) to see
    the shapes of a concrete example: ``Notation(batch="2", tokens="5", width="8", heads="2",
    key="4", value="4")``.

    Raises ``ValueError`` naming a field that is not a str.
    """

    batch: str = "B"
    tokens: str = "n"
    width: str = "d"
    heads: str = "h"
    key: str = "d_k"
    value: str = "d_v"
    queries: str = "n_q"
    keys: str = "n_k"

    def __post_init__(self) -> None:
        for field in fields(self):  # a number given as an int would fail only when drawn
            require_str(field.name, getattr(self, field.name))

    def times(self, a: str, b: str) -> str:
        """``a*b`` as a symbol, or the product when both are numbers (``"2", "4"`` -> ``"8"``).

        Raises ``ValueError`` naming ``a`` or ``b`` when it is not a str."""
        a, b = require_str("a", a), require_str("b", b)
        if a.isdigit() and b.isdigit():
            return str(int(a) * int(b))
        return f"{a}*{b}"


def require_point(name: str, point: object) -> tuple[float, float]:
    """``point`` as a pair ``(x, y)`` of floats; ``ValueError`` naming ``name`` otherwise."""
    if isinstance(point, str | bytes) or not isinstance(point, Sequence) or len(point) != 2:
        raise ValueError(f"{name} must be a pair (x, y) of numbers, got {point!r}")
    return (float(require_number(f"{name}[0]", point[0])),
            float(require_number(f"{name}[1]", point[1])))


#: the course's notation (``book/notation.md``); figures use it unless given another
COURSE = Notation()


def math_symbol(symbol: str) -> str:
    """A notation symbol as matplotlib maths: ``"d_k"`` -> ``"d_{k}"`` (put inside ``$...$``)."""
    base, _, sub = symbol.partition("_")
    return f"{base}_{{{sub}}}" if sub else base


def shape_label(shape: str | Sequence[str]) -> str:
    """``("B", "h", "n", "d_k")`` -> ``"(B, h, n, d_k)"``; a string is kept as it is."""
    if isinstance(shape, str):
        return shape
    if (not isinstance(shape, Sequence) or not shape
            or not all(isinstance(s, str) and s for s in shape)):
        raise ValueError(f"shape must be a string or a non-empty sequence of non-empty strings, "
                         f"got {shape!r}")
    return "(" + ", ".join(shape) + ")"


@dataclass
class Box:
    """A box of the diagram: its label, centre, size, kind and how many copies are stacked."""

    label: str
    x: float
    y: float
    width: float
    height: float
    kind: str
    stack: int = 1

    @property
    def left(self) -> float:
        return self.x - self.width / 2

    @property
    def right(self) -> float:  # stacked copies stick out to the right and below
        return self.x + self.width / 2 + STACK_STEP * (self.stack - 1)

    @property
    def bottom(self) -> float:
        return self.y - self.height / 2 - STACK_STEP * (self.stack - 1)

    @property
    def top(self) -> float:
        return self.y + self.height / 2

    def port(self, toward: tuple[float, float]) -> tuple[float, float]:
        """Where an arrow toward a point leaves the box: straight up, down or sideways when
        the point lies above, below or beside the box, else along the line from the centre."""
        px, py = toward
        if self.left <= px <= self.right and not self.bottom <= py <= self.top:
            return px, self.top if py > self.y else self.bottom
        if self.bottom <= py <= self.top and not self.left <= px <= self.right:
            return self.right if px > self.x else self.left, py
        dx, dy = px - self.x, py - self.y
        if dx == 0 and dy == 0:
            return self.x, self.y
        t = min(abs(self.width / 2 / dx) if dx else float("inf"),
                abs(self.height / 2 / dy) if dy else float("inf"))
        return self.x + t * dx, self.y + t * dy


def _shared(a: Box, b: Box, axis: str) -> float | None:
    """A coordinate both boxes span along ``axis`` (a centre if possible), else None."""
    lo_a, hi_a, c_a = (a.left, a.right, a.x) if axis == "x" else (a.bottom, a.top, a.y)
    lo_b, hi_b, c_b = (b.left, b.right, b.x) if axis == "x" else (b.bottom, b.top, b.y)
    lo, hi = max(lo_a, lo_b), min(hi_a, hi_b)
    if lo >= hi:
        return None
    for c in (c_b, c_a):
        if lo <= c <= hi:
            return c
    return (lo + hi) / 2


@dataclass
class Arrow:
    start: Box
    end: Box
    label: str
    via: tuple[tuple[float, float], ...]
    label_at: tuple[float, float] | None
    label_side: str


class Diagram:
    """A data-flow picture: :meth:`box`, :meth:`arrow`, then :meth:`figure`.

    Raises ``ValueError`` naming ``title`` when it is neither a str nor None."""

    def __init__(self, title: str | None = None) -> None:
        self.title = None if title is None else require_str("title", title)
        self.boxes: list[Box] = []
        self.arrows: list[Arrow] = []

    def box(self, label: str, at: tuple[float, float], *, kind: str = "op",
            width: float = 1.8, height: float = 0.62, stack: int = 1) -> Box:
        """Add a box centred at ``at``; ``label`` may use matplotlib's ``$...$`` maths.

        ``kind`` is ``"op"`` (an operation), ``"tensor"`` (an input or output) or ``"note"``;
        ``stack > 1`` draws that many offset copies behind it (one per head, say).

        Raises ``ValueError`` naming ``kind``, ``at``, ``width``/``height`` or ``stack`` for a
        value outside what is said above.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
        if width <= 0 or height <= 0:
            raise ValueError(f"width and height must be positive, got {width} and {height}")
        stack = require_int("stack", stack)
        at = require_point("at", at)
        box = Box(label, float(at[0]), float(at[1]), float(width), float(height), kind, stack)
        self.boxes.append(box)
        return box

    def arrow(self, start: Box, end: Box, shape: str | Sequence[str] | None = None, *,
              name: str | None = None, via: Sequence[tuple[float, float]] = (),
              label_at: tuple[float, float] | None = None, label_side: str = "right") -> Arrow:
        """An arrow from ``start`` to ``end`` labelled with the tensor's ``name`` and ``shape``.

        ``via`` lists corner points the arrow passes through (for an L-shaped route);
        the label sits beside the arrow's middle (``label_side`` ``"right"``, ``"left"`` or
        ``"on"``), or at ``label_at``.

        Raises ``ValueError`` naming ``start``, ``end`` (not a box of this diagram), ``via``,
        ``label_at``, ``label_side``, ``name`` (not a str) or ``shape`` (neither a str nor a
        sequence of non-empty strs).
        """
        for which, b in (("start", start), ("end", end)):
            if b not in self.boxes:
                raise ValueError(f"{which} must be a box of this diagram, got {b!r}")
        if label_side not in ("right", "left", "on"):
            raise ValueError(f"label_side must be 'right', 'left' or 'on', got {label_side!r}")
        if isinstance(via, str | bytes) or not isinstance(via, Sequence):
            raise ValueError(f"via must be a list of (x, y) points, got {via!r}")
        via = tuple(require_point(f"via[{i}]", point) for i, point in enumerate(via))
        label_at = None if label_at is None else require_point("label_at", label_at)
        name = None if name is None else require_str("name", name)
        parts = [p for p in (name, None if shape is None else shape_label(shape)) if p]
        arrow = Arrow(start, end, "  ".join(parts), via, label_at, label_side)
        self.arrows.append(arrow)
        return arrow

    def alt_text(self) -> str:
        """The picture in words, arrow by arrow, for the image's alt text.

        Raises nothing."""
        def plain(text: str) -> str:
            for tex, word in (("\\div", "divide by"), ("\\sqrt", "square root of "),
                              ("^\\top", " transposed"), ("\\,", " "), ("$", ""), ("{", ""),
                              ("}", ""), ("\\", ""), ("\n", " ")):
                text = text.replace(tex, word)
            return " ".join(text.split())

        steps = [f"{plain(a.start.label)} to {plain(a.end.label)}"
                 + (f" ({a.label.replace('  ', ' of shape ')})" if a.label else "")
                 for a in self.arrows]
        head = f"Data-flow diagram: {plain(self.title)}. " if self.title else "Data-flow diagram. "
        return head + "; ".join(steps) + "."

    def figure(self, max_width: float = 8.0) -> Figure:
        """Draw the diagram into a new figure, at most ``max_width`` inches wide.

        One box unit is :data:`mha.diagrams.UNIT` inches, so every diagram of the book has the
        same font size, scaled down only if the diagram would be wider than ``max_width``
        (book width at 100 dpi is 8 inches). The limits take in every label, measured after drawing.

        Raises ``ValueError`` when the diagram has no boxes, or naming ``max_width`` (not
        positive).
        """
        if not self.boxes:
            raise ValueError("the diagram has no boxes: add some with box()")
        if max_width <= 0:
            raise ValueError(f"max_width must be positive, got {max_width}")
        import matplotlib.pyplot as plt

        x0, x1, y0, y1 = self._extent()
        fig = plt.figure(figsize=((x1 - x0) * UNIT, (y1 - y0) * UNIT), facecolor="white")
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.axis("off")
        for box in self.boxes:
            self._draw_box(ax, box)
        for arrow in self.arrows:
            self._draw_arrow(ax, arrow)
        # grow the limits to take in every text as drawn (the scale stays UNIT inches a unit)
        renderer = fig.canvas.get_renderer()
        to_data = ax.transData.inverted()
        for text in ax.texts:
            (tx0, ty0), (tx1, ty1) = to_data.transform(text.get_window_extent(renderer))
            x0, x1, y0, y1 = min(x0, tx0 - PAD), max(x1, tx1 + PAD), \
                min(y0, ty0 - PAD), max(y1, ty1 + PAD)
        if self.title:  # centred over everything, in a band of its own
            ax.text((x0 + x1) / 2, y1, self.title, ha="center", va="bottom",
                    fontsize=BOX_FONT + 1, fontweight="bold")
            y1 += TITLE_BAND
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        width, height = (x1 - x0) * UNIT, (y1 - y0) * UNIT
        shrink = min(1.0, max_width / width)
        fig.set_size_inches(width * shrink, height * shrink)
        if shrink < 1:
            for text in ax.texts:
                text.set_fontsize(text.get_fontsize() * shrink)
        return fig

    def _extent(self) -> tuple[float, float, float, float]:
        """The boxes' and corners' extent plus a margin (labels are added when drawn)."""
        xs = [b.left for b in self.boxes] + [b.right for b in self.boxes]
        ys = [b.bottom for b in self.boxes] + [b.top for b in self.boxes]
        for a in self.arrows:
            xs += [x for x, _ in a.via]
            ys += [y for _, y in a.via]
        return min(xs) - PAD, max(xs) + PAD, min(ys) - PAD, max(ys) + PAD

    def _draw_box(self, ax, box: Box) -> None:
        from matplotlib.patches import FancyBboxPatch

        fill, edge = KINDS[box.kind]
        for i in reversed(range(box.stack)):
            patch = FancyBboxPatch(
                (box.x - box.width / 2 + STACK_STEP * i,
                 box.y - box.height / 2 - STACK_STEP * i),
                box.width, box.height, boxstyle="round,pad=0,rounding_size=0.12",
                facecolor=fill, edgecolor=edge, linewidth=1.4,
                linestyle="--" if box.kind == "note" else "-", zorder=2)
            ax.add_patch(patch)
        ax.text(box.x, box.y, box.label, ha="center", va="center", fontsize=BOX_FONT, zorder=3)

    def _points(self, a: Arrow) -> list[tuple[float, float]]:
        """The arrow's path: straight between boxes that line up, else through ``via``."""
        start, end = a.start, a.end
        if a.via:
            return [start.port(a.via[0]), *a.via, end.port(a.via[-1])]
        x = _shared(start, end, "x")
        if x is not None:
            return [start.port((x, end.y)), end.port((x, start.y))]
        y = _shared(start, end, "y")
        if y is not None:
            return [start.port((end.x, y)), end.port((start.x, y))]
        return [start.port((end.x, end.y)), end.port((start.x, start.y))]

    def _label_place(self, a: Arrow) -> tuple[tuple[float, float], str]:
        """Where the label goes and its horizontal alignment."""
        pts = self._points(a)
        # the longest segment carries the label
        i = max(range(len(pts) - 1),
                key=lambda k: abs(pts[k + 1][0] - pts[k][0]) + abs(pts[k + 1][1] - pts[k][1]))
        (xa, ya), (xb, yb) = pts[i], pts[i + 1]
        mx, my = (xa + xb) / 2, (ya + yb) / 2
        if a.label_at is not None:
            return a.label_at, "center"
        if a.label_side == "on":
            return (mx, my), "center"
        offset = 0.12 if a.label_side == "right" else -0.12
        return (mx + offset, my), "left" if a.label_side == "right" else "right"

    def _draw_arrow(self, ax, a: Arrow) -> None:
        from matplotlib.patches import FancyArrowPatch

        pts = self._points(a)
        for (xa, ya), (xb, yb) in zip(pts[:-2], pts[1:-1], strict=True):
            ax.plot([xa, xb], [ya, yb], color="#333333", linewidth=1.4, zorder=1,
                    solid_capstyle="butt")
        ax.add_patch(FancyArrowPatch(pts[-2], pts[-1], arrowstyle="-|>", mutation_scale=14,
                                     color="#333333", linewidth=1.4, shrinkA=0, shrinkB=1,
                                     zorder=1))
        if a.label:
            (lx, ly), ha = self._label_place(a)
            ax.text(lx, ly, a.label, ha=ha, va="center", fontsize=SHAPE_FONT,
                    family="monospace", color=SHAPE_COLOUR, zorder=4,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white",
                          "edgecolor": "none", "alpha": 0.9})
