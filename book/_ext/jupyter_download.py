"""Make the download button of a notebook page serve the Jupyter edition.

sphinx-book-theme's download button (the arrow, ".ipynb") links to the page's source as Sphinx
copied it, ``_build/html/_sources/notebooks/X.ipynb``: the MyST source, every solution open and
its markup raw in Jupyter. Once the build is done, this extension writes the Jupyter edition
(tools/jupyter_edition.py: plain Jupyter markdown, solutions folded; what the launch buttons
open) over every notebook page's copy there, and says so in the button's tooltip. Sphinx copies a
page's source only when it writes the page, so every build writes them all again.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

TOOLTIP = "Download the notebook (Jupyter edition: solutions folded)"


def jupyter_edition(srcdir: Path):
    """tools/jupyter_edition.py, loaded from its file (the tool is not a package's module)."""
    name = "jupyter_edition"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, srcdir / "tools" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def write_editions(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    srcdir, sources = Path(app.srcdir), Path(app.outdir) / "_sources"
    edition = jupyter_edition(srcdir)
    book = edition.load_book(srcdir)
    for docname in sorted(app.env.found_docs):
        copied = sources / f"{docname}.ipynb"
        if not (srcdir / f"{docname}.ipynb").exists() or not copied.exists():
            continue
        nb = json.loads((srcdir / f"{docname}.ipynb").read_text(encoding="utf-8"))
        edition.replace_file(copied, edition.serialize(edition.convert_notebook(nb, book, docname)))


def relabel(app, pagename, templatename, context, doctree) -> None:
    if context.get("page_source_suffix") != ".ipynb":
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            for button in group.get("buttons", []):
                if button.get("label") == "download-source-button":
                    button["tooltip"] = TOOLTIP


def setup(app):
    app.connect("build-finished", write_editions)
    # sphinx-book-theme adds the header buttons at priority 501
    app.connect("html-page-context", relabel, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
