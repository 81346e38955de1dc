"""Markdown with maths as safe HTML, for the by-hand pages: a student's answer and the chapter's
prompt, rendered as the book shows them, with nothing a student typed able to act.

The parser is markdown-it-py with mdit-py-plugins' dollarmath (what myst-parser uses), with raw
HTML off: a student's ``<script>``, ``<img onerror>`` or ``<!--`` is text. Links and images are
shown as text with their address (a page makes no request and has nothing to click); maths is
left as escaped TeX in elements of class ``math-inline`` and ``math-display``, which MathJax
typesets in the browser from the files ``write_mathjax`` copies next to the pages (MathJax 3 from
django-static-mathjax, the copy the book serves: no network). MathJax's TeX has no ``\\href``,
``\\class``, ``\\style``, ``\\require`` or ``\\setOptions`` there, and only the parsed maths is
typeset. One student's maths cannot touch another's: each answer is typeset by a fresh TeX input
(its macros and labels are its own), within a budget of work (``MAX_MACROS``, ``MAX_NODES``), and
the page clips each answer to its box, at most ``by_hand.BOX_PX`` high (``by_hand.STYLE``); no
link, class, id or style of an answer survives typesetting. Tables are bounded too
(``MAX_TABLE_CELLS``).

When markdown-it-py, mdit-py-plugins or MathJax is missing (an environment without the course's
book packages), the pages fall back to text as typed, and say so.
"""

from __future__ import annotations

import functools
import html
import os
import re
import tempfile
from pathlib import Path

# markdown-it is quadratic on some inputs (20,000 characters of "![" take 8 s here): beyond
# this many characters of one answer, markdown is shown as typed
MAX_RENDERED = 10_000
# markdown-it pads every row of a table to its delimiter row's columns: 1,000 columns by 3,000
# rows fit in 10,000 characters (57 s and 3 GB in an attack's measure); beyond this many cells
# in one answer (at most: see ``table_cells``), markdown is shown as typed
MAX_TABLE_CELLS = 20_000
# a line that can be a table's delimiter row, in a quote or list item: |-|:-:| or - 1. > |---|
DELIMITER_ROW = re.compile(r"[\s|:\->*+.)\d]*")  # with a pipe (one class: no backtracking)

MATHJAX_BUNDLE = "tex-svg-full.js"  # every TeX package in one file (nothing loaded on demand)
# Each answer's maths is typeset by a TeX input of its own (MathJax.startup.getComponents makes a
# fresh one): no macro (\newcommand, \def, \let), label or option one student defines reaches
# another's, and nothing in TeX can undo that. Each answer gets a budget of macro expansions and of
# MathML nodes and of formulas, so its maths costs bounded time: past it, the rest of its maths is
# shown as typed.
MAX_MACROS = 2_000  # macro expansions in one answer (MathJax's own limit is 10,000 per formula)
MAX_NODES = 20_000  # MathML nodes made for one answer (a line of softmax draws 56 elements)
# formulas typeset in one answer: chromium measures each formula's text that MathJax's fonts lack
# (26 ms a formula in an attack: 2,490 formulas of one CJK character each, within the budgets
# above, took 66 s and failed the class's PDF); the course's longest cell has 92
MAX_FORMULAS = 300
MATHJAX_CONFIG = """\
// MathJax for the by-hand pages (written by mha-grade report): only the maths the report parsed
// (elements of class math-inline and math-display, whose text is the TeX) is typeset, each
// answer (section.student) by a fresh TeX input and within a budget of macros, nodes and formulas.
window.MathJax = {
  loader: {load: ['ui/safe']},
  tex: {packages: {'[-]': ['html', 'require', 'autoload', 'setoptions']}},
  // no address, class, id or style from an answer's TeX (\\mmlToken{mi}[href=...]{x} made links)
  options: {enableMenu: false, enableAssistiveMml: false,
            safeOptions: {allow: {URLs: 'none', classes: 'none', cssIDs: 'none', styles: 'none'}}},
  svg: {fontCache: 'local'},
  startup: {
    typeset: false,
    pageReady: function () {
      return MathJax.startup.defaultPageReady().then(function () {
        var util = MathJax._.input.tex.ParseUtil.default;
        var TexError = MathJax._.input.tex.TexError.default;
        var checkMacros = util.checkMaxMacros;
        var left = {macros: 0, nodes: 0};
        util.checkMaxMacros = function (parser, isMacro) {
          if (--left.macros < 0) {
            throw new TexError('AnswerMacros', 'this answer used up its macro expansions');
          }
          return checkMacros(parser, isMacro);
        };
        function freshInput() {  // a new TeX input and document: nothing left from before
          MathJax.startup.getComponents();
          var factory = MathJax.startup.input[0].parseOptions.nodeFactory;
          var create = factory.create.bind(factory);
          factory.create = function () {
            if (--left.nodes < 0) throw new Error('this answer used up its maths nodes');
            return create.apply(null, arguments);
          };
          left = {macros: MAX_MACROS, nodes: MAX_NODES, formulas: MAX_FORMULAS};
        }
        var owner;
        document.querySelectorAll('.math-inline, .math-display').forEach(function (node) {
          var section = node.closest('section.student');
          if (section !== owner) {
            owner = section;
            freshInput();
          }
          if (left.nodes < 0 || left.macros < 0 || --left.formulas < 0) {  // over budget: as typed
            node.classList.add('math-skipped');
            return;
          }
          try {
            var display = node.classList.contains('math-display');
            var drawn = MathJax.tex2svg(node.textContent, {display: display});
            // the hidden MathML copy is positioned outside the page's flow: a tall one (a
            // \\rule of 10^6 em) made chromium print 19,000 pages past the answer's clipped box
            drawn.querySelectorAll('mjx-assistive-mml').forEach(function (copy) {
              copy.remove();
            });
            // no link from an answer (\\mmlToken{mi}[href=...], \\href): ui/safe lets
            // http:, file: and relative addresses through; the drawing keeps its text
            drawn.querySelectorAll('a').forEach(function (link) {
              link.removeAttribute('href');
              link.removeAttributeNS('http://www.w3.org/1999/xlink', 'href');
            });
            node.replaceChildren(drawn);
          } catch (error) {
            node.classList.add('math-error');
          }
        });
        MathJax.startup.document.clear();
        MathJax.startup.document.updateDocument();  // adds the SVG stylesheet
        document.documentElement.dataset.typeset = 'done';
      });
    }
  }
};
""".replace("MAX_MACROS", str(MAX_MACROS)).replace("MAX_NODES", str(MAX_NODES)).replace(
    "MAX_FORMULAS", str(MAX_FORMULAS))


def mathjax_source() -> Path | None:
    """The folder of MathJax 3's files (django-static-mathjax), or None when it is missing."""
    try:
        import mathjax  # django-static-mathjax
    except ImportError:
        return None
    folder = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return folder if (folder / MATHJAX_BUNDLE).is_file() else None


def replace(path: Path, data: bytes) -> None:
    """``path`` holding ``data``, written under a fresh name and renamed over it (never written
    through a symbolic link there), in a folder that is no link."""
    if path.parent.is_symlink():
        raise ValueError(f"{path.parent} is a symbolic link: not written through")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_mathjax(folder: Path) -> bool:
    """Copies what the pages load into ``folder/mathjax``; False when MathJax is missing."""
    source = mathjax_source()
    if source is None:
        return False
    target = folder / "mathjax"
    for name in (MATHJAX_BUNDLE, "ui/safe.js"):
        replace(target / name, (source / name).read_bytes())
    replace(target / "config.js", MATHJAX_CONFIG.encode())
    return True


def mathjax_head() -> str:
    """The page's script elements (files of the report's own folder)."""
    return ('<script src="mathjax/config.js"></script>\n'
            f'<script defer src="mathjax/{MATHJAX_BUNDLE}"></script>\n')


def _math(self, tokens, index, options, env) -> str:
    kind = "math-inline" if tokens[index].type == "math_inline" else "math-display"
    return f'<span class="{kind}">{html.escape(tokens[index].content)}</span>'


def _link_open(self, tokens, index, options, env) -> str:
    env.setdefault("links", []).append(tokens[index].attrGet("href") or "")
    return '<span class="link">'


def _link_close(self, tokens, index, options, env) -> str:
    target = env["links"].pop() if env.get("links") else ""
    return f'</span> <span class="url">&lt;{html.escape(target)}&gt;</span>'


def _image(self, tokens, index, options, env) -> str:
    token = tokens[index]
    alt = "".join(child.content for child in token.children or [])
    return (f'<span class="url">[image {html.escape(alt)!s} &lt;'
            f'{html.escape(token.attrGet("src") or "")}&gt;, not loaded]</span>')


@functools.cache
def parser():
    """markdown-it-py as CommonMark with tables, raw HTML off, and $...$ / $$...$$ maths; None
    when it is not installed."""
    try:
        from markdown_it import MarkdownIt
        from mdit_py_plugins.dollarmath import dollarmath_plugin
    except ImportError:
        return None
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.use(dollarmath_plugin, double_inline=True)
    for rule in ("math_inline", "math_inline_double", "math_block", "math_block_label"):
        md.add_render_rule(rule, _math)
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("link_close", _link_close)
    md.add_render_rule("image", _image)
    return md


def table_cells(text: str) -> int:
    """At most how many cells markdown-it makes of the tables in ``text``: each row (a line)
    has its table's columns, no more than the pipes of its delimiter row plus one."""
    lines = re.split(r"\r\n?|\n", text)  # markdown-it's line breaks
    columns = max((line.count("|") + 1 for line in lines
                   if "|" in line and DELIMITER_ROW.fullmatch(line)),
                  default=1)
    return len(lines) * columns


def markdown_html(text: str) -> str | None:
    """``text`` (markdown with maths) as HTML in which every tag is the renderer's own; None when
    markdown-it-py is missing."""
    md = parser()
    return None if md is None else md.render(text, {})


# ---------------------------------------------------------------------------------------------
# The chapter's prompt: MyST to the markdown above

FENCE = re.compile(r"^(`{3,}|:{3,})\{(\w[\w-]*)\}[ \t]*(.*)$")
CLOSE = re.compile(r"^(`{3,}|:{3,})[ \t]*$")
CODE = re.compile(r"^(`{3,}|~{3,})")
OPTION = re.compile(r"^:[\w-]+:")
ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")


def _role(match: re.Match) -> str:
    name, content = match.groups()
    if name == "math":
        return f"${content}$"
    text = re.sub(r"\s*<[^<>]*>$", "", content)  # "text <target>" shows the text
    if name.startswith("cite"):
        return f"[{text}]"
    return text.lstrip("~!")


def myst_markdown(text: str) -> str:
    """A prompt in MyST as plain markdown: a directive's title in bold, its options dropped, its
    fences gone (``{math}`` blocks as $$...$$), code fences kept, roles as their text."""
    out, opened, in_options = [], [], False
    for line in text.split("\n"):
        directive = FENCE.match(line)
        if in_options and OPTION.match(line):
            continue
        in_options = False
        if directive:
            name, title = directive.group(2), directive.group(3).strip()
            opened.append(name)
            # an exercise's title is shown; a solution's argument is its exercise's label
            heading = f"**{ROLE.sub(_role, title)}**" if title and name != "solution" else ""
            out.append("\n$$" if name == "math" else heading)
            in_options = name != "math"
        elif opened and opened[-1] == "code" and CLOSE.match(line):
            opened.pop()
            out.append(line)
        elif CODE.match(line) and not CLOSE.match(line) or (CLOSE.match(line) and not opened):
            opened.append("code")  # a code fence: kept as it is
            out.append(line)
        elif opened and CLOSE.match(line):
            out.append("$$\n" if opened.pop() == "math" else "")
        elif opened and opened[-1] == "code":
            out.append(line)
        else:
            out.append(ROLE.sub(_role, line))
    return "\n".join(out).strip()
