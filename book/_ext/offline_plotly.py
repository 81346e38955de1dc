"""Serve plotly.js from the book itself, so interactive charts draw without a network.

A notebook output of ``mha.explorer`` (a ``<div class="mha-plotly">`` and a script that calls
``window.Plotly``) needs plotly.js on its page. This extension copies ``plotly.min.js`` from the
installed ``plotly`` package (the same version the notebooks were run with) into ``_static`` and
adds it, deferred, to the pages that hold such a chart and only to them (4.8 MB).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import plotly

SOURCE = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
TARGET = "plotly.min.js"  # in _static
MARKER = 'class="mha-plotly"'


def add_plotly_to_chart_pages(app, pagename, templatename, context, doctree) -> None:
    if MARKER in context.get("body", ""):
        # a call during html-page-context adds the script to this page only
        app.add_js_file(TARGET, loading_method="defer")


def copy_plotly(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / TARGET
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(SOURCE, target)


def setup(app):
    if not SOURCE.exists():
        raise RuntimeError(f"plotly.js not found at {SOURCE}: is plotly installed?")
    app.connect("html-page-context", add_plotly_to_chart_pages)
    app.connect("build-finished", copy_plotly)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
