"""Point the Colab and Binder launch buttons at the Jupyter edition.

A chapter's source notebook is written in MyST for the book; Colab and JupyterLab would show its
exercises, lemmas and references as raw text. The book's workflow (.github/workflows/pages.yml)
publishes the Jupyter edition (tools/jupyter_edition.py: plain Jupyter markdown, same paths) to
its own branch, ``jupyter_edition_branch`` ("jupyter"). sphinx-book-theme builds every launch URL
from the repository's branch (``main``), so this extension, run after the theme's
``add_launch_buttons``, swaps that branch for the edition's in the Colab and Binder links:

    https://colab.research.google.com/github/ORG/REPO/blob/main/notebooks/X.ipynb
 -> https://colab.research.google.com/github/ORG/REPO/blob/jupyter/notebooks/X.ipynb
    https://mybinder.org/v2/gh/ORG/REPO/main?urlpath=lab/tree/notebooks/X.ipynb
 -> https://mybinder.org/v2/gh/ORG/REPO/jupyter?urlpath=lab/tree/notebooks/X.ipynb

The repository and "edit" buttons keep pointing at the sources on ``main``.
"""

from __future__ import annotations


def edition_url(url: str, source_branch: str, edition_branch: str) -> str:
    """``url`` of a launch button, opening the edition's branch instead of the sources'."""
    for before, after in [(f"/blob/{source_branch}/", f"/blob/{edition_branch}/"),  # Colab
                          (f"/{source_branch}?urlpath=", f"/{edition_branch}?urlpath=")]:  # Binder
        if before in url:
            return url.replace(before, after, 1)
    return url


def retarget(app, pagename, templatename, context, doctree) -> None:
    edition_branch = app.config.jupyter_edition_branch
    source_branch = app.config.html_theme_options.get("repository_branch") or "main"
    if not edition_branch:
        return
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if "url" in button:
                button["url"] = edition_url(button["url"], source_branch, edition_branch)


def setup(app):
    app.add_config_value("jupyter_edition_branch", "jupyter", "html")
    # sphinx-book-theme adds the launch buttons at priority 501
    app.connect("html-page-context", retarget, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
