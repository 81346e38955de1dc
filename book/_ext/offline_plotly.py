"""Serve plotly.js from the book itself, so interactive charts draw without a network.

A notebook output of ``mha.explorer`` (a ``<div class="mha-plotly">`` and a script that calls
``window.Plotly``) needs plotly.js on its page. The charts are heat maps only, so the book serves
Plotly's published partial bundle "cartesian" (heatmap, scatter, bar, ... : 0.50 MB gzip-compressed,
the full ``plotly.min.js`` 1.47 MB), vendored unchanged with its licence in ``book/_static/vendor/``
from the npm package ``plotly.js-cartesian-dist-min``. This extension adds it, deferred, to the
pages that hold such a chart and only to them.

The bundle must be the plotly.js version that the installed ``plotly`` package (which wrote the
charts' JSON) ships; the build stops with a message when they differ. To update it:
``npm pack plotly.js-cartesian-dist-min@<version>`` and copy ``plotly-cartesian.min.js``.
"""

from __future__ import annotations

import re
from pathlib import Path

import plotly

BUNDLE = "vendor/plotly-cartesian.min.js"  # in book/_static, which Sphinx copies to _static
VENDORED = Path(__file__).parent.parent / "_static" / BUNDLE
PACKAGED = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
MARKER = 'class="mha-plotly"'


def plotly_js_version(path: Path) -> str:
    """The version in the licence header, e.g. ``4.1.1`` from `` * plotly.js ... v4.1.1``."""
    with path.open(encoding="utf-8") as f:
        header = f.read(300)
    found = re.search(r"plotly\.js[^\n]* v(\d+\.\d+\.\d+)", header)
    if found is None:
        raise RuntimeError(f"no plotly.js version in the header of {path}")
    return found.group(1)


def add_plotly_to_chart_pages(app, pagename, templatename, context, doctree) -> None:
    if MARKER in context.get("body", ""):
        # a call during html-page-context adds the script to this page only
        app.add_js_file(BUNDLE, loading_method="defer")


def setup(app):
    vendored, packaged = plotly_js_version(VENDORED), plotly_js_version(PACKAGED)
    if vendored != packaged:
        raise RuntimeError(
            f"{VENDORED} is plotly.js {vendored} but the installed plotly package draws with "
            f"plotly.js {packaged}: vendor plotly.js-cartesian-dist-min@{packaged} from npm")
    app.connect("html-page-context", add_plotly_to_chart_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
