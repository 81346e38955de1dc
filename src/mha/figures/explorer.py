"""An interactive attention explorer: every head's weights, layer by layer, in the browser.

``attention_explorer(tokens, weights)`` takes weights of shape ``(layers, heads, n_q, n_k)``
(or ``(heads, n_q, n_k)`` for one layer) and returns an :class:`AttentionExplorer`, which a
notebook displays as a Plotly chart: a grid of the heads of one layer side by side, a menu to
choose the layer and one to look at a single head large, with its tokens on the axes. Hovering a
cell shows the query, the key and the weight; a query's row is its distribution over the keys.
Layers, heads, queries and keys count from 0, as in the code and everywhere in the course: the
menus read "layer 0" ... and "head 0" ..., the hover "query 3 (sat)", and ``weights[l, h]`` is
"layer l, head h".

Pure Plotly JSON, no kernel needed: the two menus change disjoint properties (the layer menu the
traces' ``visible``, the head menu the axes' layout), so they combine freely, and each head's
weights are stored once. It renders offline everywhere:

- JupyterLab and VS Code draw the ``application/vnd.plotly.v1+json`` output with the plotly.js
  that the ``plotly`` package installs with its JupyterLab extension;
- the book draws the ``text/html`` output with the plotly.js that ``book/_ext/offline_plotly.py``
  copies from the ``plotly`` package into the book (never a CDN);
- in Colab, whose outputs are separate frames, the ``text/html`` output carries plotly.js itself,
  read from the installed ``plotly`` package.

Both committed outputs are deterministic: weights rounded to ``decimals`` places, the HTML's
element id a hash of the chart, so ``pytest --nbval`` compares them exactly.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import sys
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from mha._validation import (
    check_output_allocation,
    require_distributions,
    require_int,
    require_values,
)

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
HEIGHT = 560  # pixels
# white for no attention, dark blue for all of it (matplotlib's "Blues" at its ends)
COLORSCALE = [[0.0, "#f7fbff"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"],
              [1.0, "#08306b"]]
GAP = 0.03  # between grid columns, as a fraction of the plot area
TITLE_GAP = 0.06  # above each grid cell, for its title
MENU_BAND = 0.1  # the top part of the figure that holds the menus


def _as_array(weights: object) -> np.ndarray:
    if isinstance(weights, torch.Tensor | np.ndarray):
        # the chart copies weights as float64 (a stride-0 view costs nothing, its copy does)
        check_output_allocation("attention_explorer's copy", "weights", weights,
                                weights.shape, torch.float64,
                                "show fewer layers, heads or tokens")
    given = None  # a float tensor as passed: checked as distributions in its own dtype
    if isinstance(weights, torch.Tensor):
        require_values("weights", weights)  # the chart shows the values: meta has none
        if weights.is_complex():  # .double() would drop the imaginary part (tester 49)
            weights = weights.detach().cpu().numpy()  # refused below, as a complex array is
        else:
            given = weights.detach().cpu()
            weights = given.double().numpy()
    if given is not None and (not given.is_floating_point() or given.dtype.itemsize == 1):
        given = None  # float8 has no sum in torch: checked in float64, as before
    if isinstance(weights, np.ndarray) and np.issubdtype(weights.dtype, np.floating):
        # torch.from_numpy below refuses negative strides (w[..., ::-1]), a non-native byte
        # order (">f8") and np.longdouble, and warns that a read-only array is not writable:
        # a native, contiguous copy in the same dtype (longdouble, which torch lacks, as
        # float64) is what it takes
        native = weights.dtype.newbyteorder("=")
        if native not in (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)):
            native = np.dtype(np.float64)
        weights = np.array(weights, dtype=native, order="C", copy=True)
    if not isinstance(weights, np.ndarray) or not np.issubdtype(weights.dtype, np.floating):
        raise ValueError(f"weights must be a float torch.Tensor or numpy array, got "
                         f"{type(weights).__name__}"
                         f"{f' of dtype {weights.dtype}' if hasattr(weights, 'dtype') else ''}")
    if weights.ndim == 3:
        weights = weights[None]  # (heads, n_q, n_k) -> (1, heads, n_q, n_k)
    if weights.ndim != 4 or 0 in weights.shape:
        raise ValueError(f"weights must have shape (layers, heads, n_q, n_k) or "
                         f"(heads, n_q, n_k), got {tuple(weights.shape)}")
    if not np.isfinite(weights).all():
        raise ValueError("weights must be finite (no NaN or inf)")
    # the colour scale and the hover say "weight": raw scores would be drawn without a word
    # in the input's dtype: the tolerance for a bfloat16 softmax's rows (10 eps) is lost in
    # float64, where real bfloat16 softmax outputs would read as "not softmax outputs"
    require_distributions("weights", torch.from_numpy(weights) if given is None else given)
    return weights


def _unique(tokens: Sequence[str]) -> list[str]:
    """The tokens as distinct axis categories: a repeated token gets zero-width spaces added,
    so "the" twice gives two rows that both read "the" (Plotly merges equal categories)."""
    used: set[str] = set()
    out = []
    for t in tokens:
        label = str(t)
        while label in used:  # a token that already ends in one is another token (tester 48)
            label += "\u200b"
        used.add(label)
        out.append(label)
    return out


def _n(head: int) -> str:
    """Plotly's name suffix for the axes of a head: x, x2, x3, ... (the first has none)."""
    return "" if head == 0 else str(head + 1)


def _typed(z: np.ndarray) -> dict:
    """A matrix as a Plotly typed array: float32 bytes in base64, about 5.3 characters a
    number, one string per head (a notebook file would otherwise put every number on a line)."""
    data = np.ascontiguousarray(z, dtype="<f4")
    return {"dtype": "f4", "bdata": base64.b64encode(data.tobytes()).decode("ascii"),
            "shape": f"{z.shape[0]}, {z.shape[1]}"}


def _grid(heads: int) -> tuple[int, int]:
    cols = math.ceil(math.sqrt(heads)) if heads > 3 else heads
    if heads == 12:
        cols = 4
    return math.ceil(heads / cols), cols


class AttentionExplorer:
    """A Plotly chart of attention weights; ``spec`` is its JSON (``data``, ``layout``,
    ``config``). Displays itself in a notebook; :meth:`to_html` gives the book's snippet."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    @property
    def json(self) -> str:
        return json.dumps(self.spec, separators=(",", ":"), sort_keys=True)

    @property
    def element_id(self) -> str:
        return "mha-explorer-" + hashlib.sha1(self.json.encode()).hexdigest()[:12]

    def to_html(self, include_plotlyjs: bool = False) -> str:
        """A ``<div>`` and a script that draws the chart with ``window.Plotly``.

        With ``include_plotlyjs`` the snippet carries plotly.js from the ``plotly`` package
        (4.8 MB), for pages that do not load it themselves (Colab's output frames).
        """
        library = ""
        if include_plotlyjs:
            from plotly.offline import get_plotlyjs

            library = f"<script type=\"text/javascript\">{get_plotlyjs()}</script>\n"
        fallback = html.escape("An interactive chart: it needs plotly.js, which the course's "
                               "book, JupyterLab and Colab provide.")
        # every "<" as JSON's \u003c (the same string to JavaScript): "</script>" would end the
        # script element early, and "<!--" followed by "<script" would make the HTML parser
        # swallow the rest of the page (a token is free text)
        spec = self.json.replace("<", "\\u003c")
        return (
            f"{library}<div id=\"{self.element_id}\" class=\"mha-plotly\" "
            f"style=\"width:100%;height:{self.spec['layout']['height']}px\">{fallback}</div>\n"
            "<script type=\"text/javascript\">\n"
            "(function () {\n"
            f"  var spec = {spec};\n"
            "  function draw() {\n"
            f"    var el = document.getElementById(\"{self.element_id}\");\n"
            "    if (!window.Plotly || !el || el.dataset.drawn) { return; }\n"
            "    el.dataset.drawn = \"1\";\n"
            "    el.textContent = \"\";\n"
            "    window.Plotly.newPlot(el, spec.data, spec.layout, spec.config);\n"
            "  }\n"
            "  if (window.Plotly) { draw(); } else { window.addEventListener(\"load\", draw); }\n"
            "})();\n"
            "</script>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        in_colab = "google.colab" in sys.modules
        return {
            PLOTLY_MIMETYPE: self.spec,
            "text/html": self.to_html(include_plotlyjs=in_colab),
            "text/plain": self._describe(),
        }

    def _describe(self) -> str:
        meta = self.spec["layout"]["meta"]
        return (f"<attention explorer: {meta['layers']} layers x {meta['heads']} heads, "
                f"{meta['n_q']} queries x {meta['n_k']} keys>")


def attention_explorer(tokens: Sequence[str], weights: torch.Tensor | np.ndarray, *,
                       key_tokens: Sequence[str] | None = None, title: str | None = None,
                       layer: int = 0, head: int | None = None,
                       decimals: int = 3) -> AttentionExplorer:
    r"""An interactive chart of attention weights $\alpha_{ij}$, every head side by side.

    ``weights``: ``(layers, heads, n_q, n_k)`` or ``(heads, n_q, n_k)``, e.g. from
    :func:`mha.models.pretrained.sentence_attention`; row ``i`` of a head is query ``tokens[i]``'s
    weights over the keys ``key_tokens`` (default: ``tokens``, self-attention).
    ``layer`` and ``head`` (counting from 0; ``head=None`` shows all heads) choose what is
    shown first; menus change both. Weights are rounded to ``decimals`` places (the hover
    shows that many), so the chart reproduces exactly; each is stored as a float32.

    Raises ``ValueError`` for weights that are not distributions (values >= 0, each row
    summing to 1, or 0 for a query that attends to nothing): scores before the softmax, or
    dropped-out weights from training mode. A layer's ``(B, h, n, n)`` weights for a batch
    would pass for ``(layers, heads, n, n)``: pass one sequence's ``weights[b]``.
    """
    w = _as_array(weights)
    layers, heads, n_q, n_k = w.shape
    for name, given in [("tokens", tokens), ("key_tokens", key_tokens)]:
        if isinstance(given, str | bytes):
            raise ValueError(f"{name} must be a list of token strings, got a str {given!r}")
        # list() below would raise a bare TypeError ("'NoneType' object is not iterable")
        if not (name == "key_tokens" and given is None) and not isinstance(given, Iterable):
            per = "query" if name == "tokens" else "key"
            raise ValueError(f"{name} must be a list of token strings (one per {per}), got "
                             f"{type(given).__name__}")
    layer = require_int("layer", layer, minimum=0, maximum=layers - 1)
    head = None if head is None else require_int("head", head, minimum=0, maximum=heads - 1)
    decimals = require_int("decimals", decimals, minimum=1, maximum=6)
    queries = list(tokens)
    keys = queries if key_tokens is None else list(key_tokens)
    # Plotly reads tick labels and hover text as markup: a token "<s>" or "<br>" would
    # vanish or break the line. Escaped, it shows as typed ("&lt;s&gt;" draws "<s>")
    plotly_queries = [html.escape(str(t), quote=False) for t in queries]
    plotly_keys = [html.escape(str(t), quote=False) for t in keys]
    # name what the caller passed: without key_tokens, tokens label the keys as well
    also_keys = "" if key_tokens is not None else (
        f" (and, with no key_tokens given, the n_k = {n_k} keys too)")
    if len(queries) != n_q:
        raise ValueError(f"tokens has {len(queries)} entries but weights of shape "
                         f"{tuple(w.shape)} have n_q = {n_q} queries{also_keys}: pass one "
                         f"token per query")
    if len(keys) != n_k:
        given = (f"key_tokens has {len(keys)} entries" if key_tokens is not None else
                 f"no key_tokens were given, so tokens ({len(keys)} entries) label the keys")
        raise ValueError(f"{given}, but weights of shape {tuple(w.shape)} have n_k = {n_k} "
                         f"keys: pass key_tokens with {n_k} entries")

    rows, cols = _grid(heads)
    z = np.round(w, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    # every trace is one head of one layer; what all share (tokens, hover text, colours)
    # sits once in the template, which Plotly applies to each heatmap
    # the hover names query and key by position and token: a repeated token stays unambiguous
    hover = [[f"query {i} ({q}) \u2192 key {j} ({k})" for j, k in enumerate(plotly_keys)]
             for i, q in enumerate(plotly_queries)]
    shared = {"x": _unique(plotly_keys), "y": _unique(plotly_queries), "text": hover,
              "coloraxis": "coloraxis",
              "hovertemplate": (f"%{{fullData.name}}<br>%{{text}}"
                                f"<br>weight %{{z:.{decimals}f}}<extra></extra>")}
    data = [{"type": "heatmap", "z": _typed(z[l, h]), "xaxis": f"x{_n(h)}",
             "yaxis": f"y{_n(h)}", "visible": l == layer, "name": f"layer {l}, head {h}"}
            for l in range(layers) for h in range(heads)]  # noqa: E741

    def axes_layout(focus: int | None) -> dict:
        """All heads in a grid (``focus`` None), or head ``focus`` filling the plot area with
        its tokens on the axes and the others shrunk out of sight."""
        out = {}
        top = 1 - MENU_BAND
        cell_w = (1 - GAP * (cols - 1)) / cols
        cell_h = (top - TITLE_GAP * rows) / rows
        for h in range(heads):
            r, c = divmod(h, cols)
            if focus is None:
                x_dom = [c * (cell_w + GAP), c * (cell_w + GAP) + cell_w]
                y_hi = top - r * (cell_h + TITLE_GAP) - TITLE_GAP
                y_dom = [y_hi - cell_h, y_hi]
            elif h == focus:
                x_dom, y_dom = [0.0, 1.0], [0.0, top]
            else:
                x_dom, y_dom = [0.0, 0.001], [0.0, 0.001]
            out[f"xaxis{_n(h)}.domain"] = [round(v, 4) for v in x_dom]
            out[f"yaxis{_n(h)}.domain"] = [round(v, 4) for v in y_dom]
            out[f"xaxis{_n(h)}.visible"] = h == focus
            out[f"yaxis{_n(h)}.visible"] = h == focus
            out[f"annotations[{h}].visible"] = focus is None
        return out

    layout: dict = {
        "height": HEIGHT, "autosize": True,
        "margin": {"l": 10, "r": 10, "t": 70 if title else 40, "b": 10},
        "paper_bgcolor": "white", "plot_bgcolor": "white",
        "font": {"family": "sans-serif", "size": 12, "color": "#222"},
        "template": {"data": {"heatmap": [shared]}},
        "coloraxis": {"colorscale": COLORSCALE, "cmin": 0.0, "cmax": 1.0,
                      "colorbar": {"title": {"text": "weight"}, "thickness": 12, "len": 0.8}},
        "meta": {"layers": layers, "heads": heads, "n_q": n_q, "n_k": n_k},
        "annotations": [{"text": f"head {h}", "xref": "paper", "yref": "paper",
                         "showarrow": False, "yanchor": "bottom", "xanchor": "center",
                         "font": {"size": 11}} for h in range(heads)],
    }
    if title:
        layout["title"] = {"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}}
    for h in range(heads):
        common = {"autorange": False, "fixedrange": True, "ticks": "", "showgrid": False,
                  "zeroline": False, "automargin": True}
        layout[f"xaxis{_n(h)}"] = {**common, "anchor": f"y{_n(h)}", "tickangle": -45,
                                   "range": [-0.5, n_k - 0.5]}
        # the first query on top; a red line follows the hovered query's row
        layout[f"yaxis{_n(h)}"] = {**common, "anchor": f"x{_n(h)}", "range": [n_q - 0.5, -0.5],
                                   "showspikes": True, "spikemode": "across",
                                   "spikethickness": 1, "spikecolor": "#d62728"}
    _apply(layout, axes_layout(head))
    grid = axes_layout(None)  # the titles stay above the grid cells; hidden when one is large
    for h, note in enumerate(layout["annotations"]):
        note["x"] = round(sum(grid[f"xaxis{_n(h)}.domain"]) / 2, 4)
        note["y"] = grid[f"yaxis{_n(h)}.domain"][1]

    # the head menu at the left edge, the layer menu at the right: apart even on a phone
    menus = [{
        "type": "dropdown", "direction": "down", "x": 0.0, "y": 1.0, "xanchor": "left",
        "yanchor": "top", "showactive": True, "active": head + 1 if head is not None else 0,
        "pad": {"t": 0, "b": 0},
        "buttons": [{"label": "all heads", "method": "relayout", "args": [axes_layout(None)]}]
        + [{"label": f"head {h}", "method": "relayout", "args": [axes_layout(h)]}
           for h in range(heads)],
    }]
    if layers > 1:
        menus.append({
            "type": "dropdown", "direction": "down", "x": 1.0, "y": 1.0, "xanchor": "right",
            "yanchor": "top", "showactive": True, "active": layer, "pad": {"t": 0, "b": 0},
            "buttons": [{"label": f"layer {l}", "method": "restyle",
                         "args": [{"visible": [i // heads == l for i in range(len(data))]}]}
                        for l in range(layers)],  # noqa: E741
        })
    layout["updatemenus"] = menus
    config = {"responsive": True, "displaylogo": False, "displayModeBar": False}
    return AttentionExplorer({"data": data, "layout": layout, "config": config})


def _apply(layout: dict, updates: dict) -> None:
    """Apply Plotly relayout paths (``"xaxis3.domain"``, ``"annotations[2].visible"``)."""
    for path, value in updates.items():
        target = layout
        parts = path.split(".")
        for part in parts[:-1]:
            if part.endswith("]"):
                name, index = part[:-1].split("[")
                target = target[name][int(index)]
            else:
                target = target.setdefault(part, {})
        last = parts[-1]
        if last.endswith("]"):
            name, index = last[:-1].split("[")
            target[name][int(index)] = value
        else:
            target[last] = value
