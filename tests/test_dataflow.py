"""The data-flow pictures: their shapes are the ones the code produces, and they read well.

The shapes written on the arrows are checked against the tensors that mha.MultiHeadAttention and
mha.attention really produce (a Notation of numbers turns the figure's symbols into sizes), and
against torch's own scaled_dot_product_attention.
"""

import re

import matplotlib
import pytest
import torch
import torch.nn.functional as F

import mha
from mha.diagrams import COURSE, Diagram, Notation, shape_label
from mha.figures import dataflow

from conventions import ROOT

matplotlib.use("Agg")

# sizes chosen all different, so a swapped axis cannot go unnoticed
SIZES = Notation(batch="2", tokens="5", width="12", heads="3", key="4", value="4",
                 queries="5", keys="5")


def arrows_by_ends(diagram: Diagram) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for a in diagram.arrows:
        found.setdefault((a.start.label, a.end.label), []).append(a.label)
    return found


def shapes(labels: list[str]) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in re.search(r"\(([\d, ]+)\)", s).group(1).split(","))
            for s in labels]


def test_multi_head_figure_shapes_are_the_modules_own():
    torch.manual_seed(0)
    module = mha.MultiHeadAttention(12, 3)
    seen = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        getattr(module, name).register_forward_hook(
            lambda m, args, out, name=name: seen.update({name: (tuple(args[0].shape),
                                                                tuple(out.shape))}))
    split = []
    original = module._split_heads
    module._split_heads = lambda x, *heads: split.append(tuple(original(x, *heads).shape)) or (
        original(x, *heads))
    _, weights = module(torch.randn(2, 5, 12))

    arrows = arrows_by_ends(dataflow.multi_head_diagram(SIZES))
    for proj in ("Q", "K", "V"):
        into, out_of = seen[f"{proj.lower()}_proj"]
        assert shapes(arrows[("input $X$", f"$W_{proj}$")]) == [into]
        assert shapes(arrows[(f"$W_{proj}$", "split heads")]) == [out_of]
    per_head = arrows[("split heads", "scaled dot-product attention, each head")]
    assert shapes(per_head) == split  # Q, K, V in this order
    assert [s.split()[0] for s in per_head] == ["Q", "K", "V"]
    concat_in, concat_out = seen["out_proj"]
    assert shapes(arrows[("scaled dot-product attention, each head",
                          "concatenate heads")]) == [(2, 3, 5, 4)]
    assert shapes(arrows[("concatenate heads", "$W_O$")]) == [concat_in]
    assert shapes(arrows[("$W_O$", "output")]) == [concat_out] == [(2, 5, 12)]
    assert shapes(arrows[("scaled dot-product attention, each head",
                          "weights $A$")]) == [tuple(weights.shape)]


@pytest.mark.parametrize("heads", [False, True])
def test_scaled_dot_product_figure_shapes_match_torch(heads):
    sizes = Notation(batch="2", heads="3", queries="4", keys="6", key="5", value="7")
    lead = (2, 3) if heads else (2,)
    q, k, v = torch.randn(*lead, 4, 5), torch.randn(*lead, 6, 5), torch.randn(*lead, 6, 7)
    out, weights = mha.attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    arrows = arrows_by_ends(dataflow.scaled_dot_product_diagram(sizes, heads=heads))
    assert shapes(arrows[("$Q$", r"$Q K^\top$")]) == [tuple(q.shape)]
    assert shapes(arrows[("$K$", r"$Q K^\top$")]) == [tuple(k.shape)]
    assert shapes(arrows[("$V$", "$A V$")]) == [tuple(v.shape)]
    assert shapes(arrows[("softmax over keys", "$A V$")]) == [tuple(weights.shape)]
    assert shapes(arrows[("$A V$", "output")]) == [tuple(out.shape)]


def test_the_course_notation_is_the_notation_page():
    page = (ROOT / "book" / "notation.md").read_text()
    for symbol in ("B", "n", "d", "h", "d_k", "d_v", "n_q", "n_k"):
        assert f"${symbol}$" in page
    assert {COURSE.batch, COURSE.tokens, COURSE.width, COURSE.heads, COURSE.key, COURSE.value,
            COURSE.queries, COURSE.keys} == {"B", "n", "d", "h", "d_k", "d_v", "n_q", "n_k"}


def test_a_change_of_notation_changes_the_drawn_figure():
    other = Notation(width="C", key="d_head", value="d_head")
    texts = [t.get_text() for t in dataflow.multi_head_figure(other).axes[0].texts]
    assert "(B, n, C)" in texts and "(B, n, h*d_head)" in texts
    assert not any("d_k" in t for t in texts)
    sdpa = [t.get_text() for t in dataflow.scaled_dot_product_figure(other).axes[0].texts]
    assert r"$\div\,\sqrt{d_{head}}$" in sdpa


@pytest.mark.parametrize("make", [dataflow.scaled_dot_product_figure,
                                  dataflow.multi_head_figure])
def test_figures_fit_the_book_are_opaque_and_no_text_overlaps(make):
    fig = make()
    width, height = fig.get_size_inches()
    assert 5 <= width <= 8 and height <= 8  # book width: 8 inches at 100 dpi
    assert tuple(fig.get_facecolor()) == (1.0, 1.0, 1.0, 1.0)  # readable in dark mode
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].texts]
    for t, b in zip(fig.axes[0].texts, boxes, strict=True):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1, \
            f"{t.get_text()!r} is cut off"
        assert t.get_fontsize() >= 10
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two labels overlap"


def test_alt_text_names_every_step_and_shape():
    alt = dataflow.multi_head_diagram().alt_text()
    assert alt.startswith("Data-flow diagram: Multi-head attention.")
    for shape in ("(B, n, d)", "(B, n, h*d_k)", "(B, h, n, d_k)", "(B, h, n, d_v)",
                  "(B, n, h*d_v)", "(B, h, n, n)"):
        assert shape in alt
    assert "$" not in alt and "\\" not in alt
    sdpa = dataflow.scaled_dot_product_diagram().alt_text()
    assert "divide by square root of d_k" in sdpa and "Q K transposed" in sdpa


def test_composing_a_new_diagram_takes_a_few_lines():
    d = Diagram("Positions")
    x = d.box("$X$", (0, 2), kind="tensor")
    plus = d.box("$X + P$", (0, 1))
    d.arrow(x, plus, ("B", "n", "d"))
    fig = d.figure()
    assert "(B, n, d)" in [t.get_text() for t in fig.axes[0].texts]
    assert d.alt_text() == "Data-flow diagram: Positions. X to X + P ((B, n, d))."


def test_bad_input_raises_value_errors():
    d = Diagram()
    with pytest.raises(ValueError, match="kind must be one of"):
        d.box("a", (0, 0), kind="circle")
    with pytest.raises(ValueError, match="stack must be a positive int"):
        d.box("a", (0, 0), stack=0)
    with pytest.raises(ValueError, match="width and height must be positive"):
        d.box("a", (0, 0), width=0)
    a = d.box("a", (0, 0))
    with pytest.raises(ValueError, match="end must be a box of this diagram"):
        d.arrow(a, Diagram().box("b", (0, 1)))
    with pytest.raises(ValueError, match="label_side"):
        d.arrow(a, a, label_side="above")
    with pytest.raises(ValueError, match="shape must be a string or a non-empty sequence"):
        shape_label(())
    with pytest.raises(ValueError, match="no boxes"):
        Diagram().figure()


def test_notebook_alt_text_of_a_course_figure_is_its_diagrams_words():
    """A cell that draws mha.dataflow.X_figure() carries X_diagram().alt_text() as its alt
    text, so a change of the figure shows up here until the alt text follows."""
    import nbformat

    from conventions import NOTEBOOKS, cell_source

    found = 0
    for path in NOTEBOOKS + sorted((ROOT / "book").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for name in ("scaled_dot_product", "multi_head"):
                if f"mha.dataflow.{name}_figure()" in cell_source(cell):
                    alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt")
                    assert alt == getattr(dataflow, f"{name}_diagram")().alt_text(), path.name
                    found += 1
    assert found >= 1


def test_notation_and_diagram_refuse_what_is_not_a_str_or_a_point_by_name():
    with pytest.raises(ValueError, match="batch must be a str, got 2"):
        Notation(batch=2)  # once accepted, and failed only inside times() while drawing
    with pytest.raises(ValueError, match="b must be a str"):
        COURSE.times("2", 4)
    assert Notation(batch="2", heads="3").times("2", "3") == "6"
    with pytest.raises(ValueError, match="title must be a str"):
        Diagram(3)
    d = Diagram("t")
    a, b = d.box("a", (0, 0)), d.box("b", (0, 1))
    with pytest.raises(ValueError, match="label_at must be a pair"):
        d.arrow(a, b, label_at=3)  # once accepted, and failed when drawn
    with pytest.raises(ValueError, match="via must be a list"):
        d.arrow(a, b, via=3)
    assert d.arrow(a, b, via=[(1, 0)], label_at=(2, 0)).via == ((1.0, 0.0),)
