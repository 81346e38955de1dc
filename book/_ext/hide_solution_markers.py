"""Leave the grading markers out of the book's code cells.

A solution cell keeps the code a student must write between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` (the markers the student edition and the grader look for, CONTRIBUTING.md).
A reader of the book needs the code, not the markers: this extension drops the two marker lines
from every code block as the page is read. The notebooks themselves are unchanged.
"""

from __future__ import annotations

from docutils import nodes

MARKERS = {"### BEGIN SOLUTION", "### END SOLUTION"}


def drop_markers(app, doctree) -> None:
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        lines = text.split("\n")
        kept = [line for line in lines if line.strip() not in MARKERS]
        if len(kept) < len(lines):
            new = block.__class__("\n".join(kept), "\n".join(kept), **block.attributes)
            block.replace_self(new)


def setup(app):
    app.connect("doctree-read", drop_markers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
