"""Serve MathJax from the book itself, so formulas render without a network.

The MathJax 3 files come from the PyPI package django-static-mathjax (installed by
requirements.txt); this extension copies what the TeX bundle (TeX in, HTML out) needs into
``_static/mathjax`` and points Sphinx's ``mathjax_path`` there instead of a CDN.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mathjax  # the module of django-static-mathjax

BUNDLE = "tex-chtml.js"  # TeX input only: the pages write no MathML
SOURCE = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
# the bundle loads fonts, TeX extensions, the menu and its accessibility tools on demand
NEEDED = [BUNDLE, "input", "output", "ui", "a11y", "sre", "adaptors"]


def use_local_mathjax(app, config) -> None:
    config.mathjax_path = f"mathjax/{BUNDLE}"


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    for name in NEEDED:
        source = SOURCE / name
        if source.is_dir():
            shutil.copytree(source, target / name, dirs_exist_ok=True)
        elif source.exists():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def setup(app):
    if not (SOURCE / BUNDLE).exists():
        raise RuntimeError(f"MathJax not found at {SOURCE}: is django-static-mathjax installed?")
    app.connect("config-inited", use_local_mathjax, priority=900)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
