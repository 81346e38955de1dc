"""The attention explorer's chart: the right weights in the right places, menus that combine,
outputs that reproduce exactly, and a notebook output every front end can draw."""

import base64
import html
import json

import nbformat
import numpy as np
import pytest
import torch

import mha
from mha.figures.explorer import PLOTLY_MIMETYPE, attention_explorer

from conventions import NOTEBOOKS, ROOT

go = pytest.importorskip("plotly.graph_objects")

TOKENS = ["[CLS]", "the", "cat", "saw", "the", "dog", "[SEP]"]


def random_weights(layers=2, heads=3, n_q=7, n_k=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(layers, heads, n_q, n_k, generator=g), dim=-1)


def decoded(trace) -> np.ndarray:
    z = trace["z"]
    rows, cols = (int(v) for v in z["shape"].split(","))
    return np.frombuffer(base64.b64decode(z["bdata"]), dtype="<f4").reshape(rows, cols)


def test_every_trace_holds_its_heads_weights_rounded():
    w = random_weights()
    spec = attention_explorer(TOKENS, w).spec
    assert len(spec["data"]) == 2 * 3
    for i, trace in enumerate(spec["data"]):
        layer, head = divmod(i, 3)
        assert trace["name"] == f"layer {layer}, head {head}"  # counting from 0, as the code
        suffix = "" if head == 0 else str(head + 1)  # Plotly's axes: x, x2, x3, ...
        assert trace["xaxis"] == f"x{suffix}" and trace["yaxis"] == f"y{suffix}"
        expected = np.round(w[layer, head].double().numpy(), 3).astype(np.float32)
        np.testing.assert_array_equal(decoded(trace), expected)
    # rows of the chart are queries, columns keys; repeated tokens stay distinct rows
    shared = spec["layout"]["template"]["data"]["heatmap"][0]
    assert len(set(shared["y"])) == len(TOKENS)
    assert [t.replace("\u200b", "") for t in shared["y"]] == TOKENS


def test_the_spec_is_valid_plotly():
    spec = attention_explorer(TOKENS, random_weights()).spec
    go.Figure(spec)  # raises on any unknown property


def test_menus_change_disjoint_properties_so_they_combine():
    spec = attention_explorer(TOKENS, random_weights(layers=3), layer=1).spec
    head_menu, layer_menu = spec["layout"]["updatemenus"]
    assert [b["label"] for b in head_menu["buttons"]] == ["all heads", "head 0", "head 1",
                                                          "head 2"]
    assert [b["label"] for b in layer_menu["buttons"]] == ["layer 0", "layer 1", "layer 2"]
    layer_keys = {k for b in layer_menu["buttons"] for k in b["args"][0]}
    head_keys = {k for b in head_menu["buttons"] for k in b["args"][0]}
    assert layer_keys == {"visible"}  # trace property
    assert all(k.startswith(("xaxis", "yaxis", "annotations")) for k in head_keys)
    for l, button in enumerate(layer_menu["buttons"]):  # noqa: E741
        assert button["args"][0]["visible"] == [i // 3 == l for i in range(9)]
    # the initial state is layer 1 (the second), all heads
    assert [t["visible"] for t in spec["data"]] == [i // 3 == 1 for i in range(9)]
    # "head 1" makes its axes fill the plot and shows its tokens; the others shrink away
    focus = head_menu["buttons"][2]["args"][0]
    assert focus["xaxis2.visible"] and focus["xaxis2.domain"] == [0.0, 1.0]
    assert not focus["xaxis.visible"] and focus["xaxis.domain"][1] <= 0.001


def test_layers_heads_queries_and_keys_count_from_0_as_in_the_code():
    """One name for one head (the notation page): the menus, the grid's titles, the trace names
    and the hover count from 0, so "layer l, head h" is weights[l, h] and "query i" its row i."""
    w = random_weights(layers=2, heads=3, n_q=3, n_k=4)
    spec = attention_explorer(["a", "b", "a"], w, key_tokens=list("wxyz"), head=2).spec
    head_menu, layer_menu = spec["layout"]["updatemenus"]
    assert head_menu["buttons"][head_menu["active"]]["label"] == "head 2"
    assert layer_menu["buttons"][layer_menu["active"]]["label"] == "layer 0"
    assert [a["text"] for a in spec["layout"]["annotations"]] == ["head 0", "head 1", "head 2"]
    for trace in spec["data"]:
        layer, head = (int(v) for v in trace["name"].replace("layer ", "").split(", head "))
        np.testing.assert_array_equal(
            decoded(trace), np.round(w[layer, head].double().numpy(), 3).astype(np.float32))
    shared = spec["layout"]["template"]["data"]["heatmap"][0]
    assert "%{text}" in shared["hovertemplate"]
    # the hover of cell (i, j) names query i and key j by position and token: the two "a"s differ
    assert shared["text"][0][0] == "query 0 (a) \u2192 key 0 (w)"
    assert shared["text"][2][3] == "query 2 (a) \u2192 key 3 (z)"
    assert len(shared["text"]) == 3 and {len(row) for row in shared["text"]} == {4}


def test_one_layer_has_no_layer_menu_and_cross_attention_has_its_own_keys():
    w = random_weights(layers=1, heads=2, n_q=3, n_k=5)[0]  # (heads, n_q, n_k)
    spec = attention_explorer(["a", "b", "c"], w, key_tokens=list("vwxyz")).spec
    assert len(spec["layout"]["updatemenus"]) == 1
    shared = spec["layout"]["template"]["data"]["heatmap"][0]
    assert shared["x"] == list("vwxyz") and shared["y"] == ["a", "b", "c"]


def test_output_is_deterministic_and_offline():
    w = random_weights()
    a, b = attention_explorer(TOKENS, w), attention_explorer(TOKENS, w.clone())
    bundle = a._repr_mimebundle_()
    assert bundle == b._repr_mimebundle_()
    assert set(bundle) == {PLOTLY_MIMETYPE, "text/html", "text/plain"}
    html = bundle["text/html"]
    assert f'id="{a.element_id}"' in html and 'class="mha-plotly"' in html
    assert "http" not in html and "cdn" not in html.lower()
    assert len(html) < 30_000  # no plotly.js outside Colab
    # a different chart gets a different element id
    assert attention_explorer(TOKENS, random_weights(seed=1)).element_id != a.element_id


def test_in_colab_the_html_carries_plotly_js_from_the_package(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "google.colab", object())
    html = attention_explorer(TOKENS, random_weights())._repr_mimebundle_()["text/html"]
    assert len(html) > 3_000_000 and "cdn.plot.ly" not in html.split("<div")[-1]


def test_size_per_weight_is_small():
    w = random_weights(layers=6, heads=12, n_q=13, n_k=13)
    size = len(attention_explorer(["t"] * 13, w).json)
    assert size / w.numel() < 12  # bytes per weight, menus included


def test_bad_input_raises_value_errors():
    w = random_weights()
    with pytest.raises(ValueError, match=r"weights must have shape \(layers, heads"):
        attention_explorer(TOKENS, w[0, 0])
    with pytest.raises(ValueError, match="weights must be a float"):
        attention_explorer(TOKENS, [[0.5]])
    with pytest.raises(ValueError, match="tokens has 3 entries .* n_q = 7"):
        attention_explorer(TOKENS[:3], w)
    with pytest.raises(ValueError, match=r"layer must lie in 0\.\.1"):
        attention_explorer(TOKENS, w, layer=2)
    with pytest.raises(ValueError, match=r"head must lie in 0\.\.2"):
        attention_explorer(TOKENS, w, head=3)
    with pytest.raises(ValueError, match="finite"):
        attention_explorer(TOKENS, w * float("nan"))


@pytest.mark.parametrize("n_q,n_k,key_tokens,expected", [
    (5, 5, None, r"^tokens has 4 entries but weights of shape \(1, 3, 5, 5\) have n_q = 5 "
                 r"queries \(and, with no key_tokens given, the n_k = 5 keys too\)"),
    (4, 5, None, r"^no key_tokens were given, so tokens \(4 entries\) label the keys, but "
                 r"weights of shape \(1, 3, 4, 5\) have n_k = 5 keys"),
    (4, 5, list("xyz"), r"^key_tokens has 3 entries, but weights of shape \(1, 3, 4, 5\) "
                        r"have n_k = 5 keys"),
])
def test_a_length_mismatch_names_the_argument_the_caller_passed(n_q, n_k, key_tokens, expected):
    """Four tokens: the message blames what was passed (tokens, or key_tokens if given)."""
    w = random_weights(layers=1, heads=3, n_q=n_q, n_k=n_k)[0]  # (heads, n_q, n_k)
    with pytest.raises(ValueError, match=expected):
        attention_explorer(list("abcd"), w, key_tokens=key_tokens)


def test_public_name():
    assert mha.attention_explorer is attention_explorer


# MyST-NB draws these; it skips any other (the book suppresses its warning for the Plotly one)
DRAWN = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
         "image/svg+xml", "application/javascript"}


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "book").glob("*.ipynb")),
                         ids=lambda p: p.name)
def test_every_output_is_drawn_by_the_book(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            kinds = set(output.get("data", {}))
            assert kinds - DRAWN <= {PLOTLY_MIMETYPE}, f"{path.name}: {kinds - DRAWN}"
            if PLOTLY_MIMETYPE in kinds:
                assert "text/html" in kinds
                json.dumps(output["data"][PLOTLY_MIMETYPE])


def test_scores_are_refused_as_weights_with_the_fix():
    scores = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="weights must be attention weights.*softmax"):
        mha.attention_explorer(list("abcd"), scores)
    mha.attention_explorer(list("abcd"), scores.softmax(dim=-1))  # the weights draw


def test_a_bfloat16_layers_own_weights_are_drawn_and_its_scores_refused():
    """bfloat16 softmax rows miss 1 by up to a few 1e-3: the check runs in the weights' dtype
    (its tolerance 10 eps), not after the copy to float64 (1e-3)."""
    for seed in range(8):
        torch.manual_seed(seed)
        layer = mha.MultiHeadAttention(32, 4).to(torch.bfloat16)
        with torch.no_grad():
            _, w = layer(torch.randn(1, 32, 32, dtype=torch.bfloat16) * 3)
        spec = attention_explorer([str(i) for i in range(32)], w[0]).spec
        for head, trace in enumerate(spec["data"]):
            expected = np.round(w[0, head].double().numpy(), 3).astype(np.float32)
            np.testing.assert_array_equal(decoded(trace), expected)
    scores = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0)).bfloat16()
    with pytest.raises(ValueError, match="weights must be attention weights.*softmax"):
        attention_explorer(list("abcd"), scores)
    # float8 (no sum in torch) is still checked in float64
    half = torch.full((1, 2, 2), 0.5).to(torch.float8_e4m3fn)
    assert decoded(attention_explorer(["a", "b"], half).spec["data"][0]).tolist() == [[0.5] * 2] * 2


@pytest.mark.parametrize("token", ["<!--<script>", "</script><p>", "a<b"])
def test_tokens_with_markup_stay_inside_the_script(token):
    """A token is free text: "<!--" then "<script" inside the script puts HTML's parser in its
    escaped state and the page after the chart is swallowed; "</script" ends it early. The
    snippet's script holds no "<" at all, and its JSON reads back as the spec."""
    chart = attention_explorer([token, "b"], random_weights(1, 2, 2, 2))
    snippet = chart.to_html()
    script = snippet.split('<script type="text/javascript">\n', 1)[1]
    script = script[: script.rindex("</script>")]
    assert "<" not in script
    line = next(t for t in script.splitlines() if t.startswith("  var spec = "))
    assert json.loads(line.removeprefix("  var spec = ").removesuffix(";")) == \
        json.loads(chart.json)
    # the hover still shows the token, escaped for Plotly's markup (which unescapes it)
    assert html.escape(token, quote=False) in chart.json


def test_explorer_names_tokens_that_are_not_a_list():
    """attention_explorer(None, w) stopped with a bare TypeError from list(None)."""
    w = torch.softmax(torch.randn(2, 3, 3), dim=-1)
    with pytest.raises(ValueError, match=r"tokens must be a list of token strings \(one per "
                                         r"query\), got NoneType"):
        attention_explorer(None, w)
    with pytest.raises(ValueError, match=r"key_tokens must be a list of token strings \(one "
                                         r"per key\), got int"):
        attention_explorer(["a", "b", "c"], w, key_tokens=3)


@pytest.mark.parametrize("tokens", [["<s>", "a", "<br>", "</s>"], ["a&b", "<b>x</b>", "c", "d"]])
def test_tokens_reach_plotly_escaped_so_they_are_not_read_as_markup(tokens):
    """Plotly reads tick labels and hover text as markup: "<s>" (strike-through) and "<br>"
    vanished, "</s>" closed a tag. Escaped, Plotly draws them as typed."""
    spec = attention_explorer(tokens, random_weights(1, 1, 4, 4)).spec
    shared = spec["layout"]["template"]["data"]["heatmap"][0]
    escaped = [t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for t in tokens]
    assert shared["x"] == escaped and shared["y"] == escaped
    assert shared["x"][0] in ("&lt;s&gt;", "a&amp;b")
    assert shared["text"][1][0] == f"query 1 ({escaped[1]}) \u2192 key 0 ({escaped[0]})"


def _flipped(w):
    return w[..., ::-1]


def _read_only(w):
    w = w.copy()
    w.flags.writeable = False
    return w


@pytest.mark.parametrize("view", [_flipped, lambda w: w.astype(np.longdouble),
                                  lambda w: w.astype(">f8"), _read_only],
                         ids=["negative-strides", "longdouble", "big-endian", "read-only"])
def test_numpy_arrays_torch_cannot_wrap_are_drawn_as_their_float64_values(view, monkeypatch):
    """torch.from_numpy refused these valid float arrays with its own messages (or warned
    that a read-only one is not writable); the chart is the one of their float64 copy."""
    w = random_weights(1, 2, 4, 4).double().numpy()
    given = view(w)
    reference = attention_explorer(list("abcd"), np.array(given, dtype=np.float64))
    wrap = torch.from_numpy

    def writable_only(array):
        # torch warns "not writable" once per process: an earlier test may have used it up
        assert array.flags.writeable, "a read-only array reached torch.from_numpy"
        return wrap(array)

    monkeypatch.setattr(torch, "from_numpy", writable_only)
    got = attention_explorer(list("abcd"), given)
    assert got.json == reference.json


def test_repeated_tokens_get_distinct_rows_even_when_one_ends_in_a_zero_width_space():
    """Tester 48: a token already ending in a zero-width space met the label made for a repeat
    of another token, and Plotly drew the two rows in one place."""
    from mha.figures.explorer import _unique

    labels = _unique(["a", "a\u200b", "a", "b", "a"])
    assert len(set(labels)) == 5 and [label.rstrip("\u200b") for label in labels] == [
        "a", "a", "a", "b", "a"]
