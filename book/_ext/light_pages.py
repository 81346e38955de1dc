"""Pages that load only what they use (tests/test_book_in_browser.py holds every page to a budget).

The theme (pydata-sphinx-theme, under sphinx-book-theme) puts ``fontawesome.js`` on every page:
1.49 MB (0.54 MB gzip-compressed) of Font Awesome's SVG-with-JavaScript kit, there "so that users
can add custom icons". The book adds none, and the theme's stylesheet already draws every icon it
uses (search, menu, GitHub, download, theme switch, admonitions...) from Font Awesome's web
fonts, so the pages do without the script: ``templates/layout.html`` removes it from the head.

Those web fonts hold some 2000 icons (0.27 MB) of which the book shows about thirty. After the
build this extension cuts each font down to the icons the built pages can show (fontTools, which
matplotlib already installs) and declares the small fonts in ``fontawesome-subset.css``, loaded
after the theme's stylesheet so its ``@font-face`` rules win. An icon is kept when a page or a
theme script names its class (``fa-bars``) or a stylesheet writes its character outside Font
Awesome's class table (the admonitions' icons).

The theme also loads Sphinx's search (``searchtools.js``, ``language_data.js`` and the whole
``searchindex.js``, 45 KB gzip-compressed) on every page, for its search-as-you-type, which is
off here (the search box opens ``search.html``, which loads them itself): the template drops
them from every other page. And two extensions add their inline settings twice (sphinx-thebe's
``const THEBE_JS_URL = ...``, a redeclaration the browser reports as an error, and
sphinx-togglebutton's selector): each script is kept once per page.
"""

from __future__ import annotations

import re
from pathlib import Path

from fontTools import subset
from markupsafe import Markup

TEMPLATES = Path(__file__).parent / "templates"
FONTAWESOME_JS = re.compile(r'<script[^>]*src="[^"]*fontawesome\.js[^"]*"[^>]*>\s*</script>\s*')
SUBSET_CSS = "fontawesome-subset.css"  # in _static
WEBFONTS = "vendor/fontawesome/webfonts"  # in _static, where the theme puts them
# (file, CSS family, weight) as the theme's stylesheet declares them
FONTS = [("fa-solid-900", "Font Awesome 6 Free", 900),
         ("fa-regular-400", "Font Awesome 6 Free", 400),
         ("fa-brands-400", "Font Awesome 6 Brands", 400)]
# Font Awesome's class table: .fa-bars:before{content:"\f0c9"} (several selectors may share one)
CLASS_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:(?:before|after),?)+)\{content:"\\([0-9a-f]+)"\}')
ICON_CLASS = re.compile(r"\bfa-[a-z0-9-]+")
PRIVATE_USE = re.compile(r'[\ue000-\uf8ff]|\\([ef][0-9a-f]{3})\b')  # a character, or its escape


SEARCH_SCRIPTS = re.compile(
    r'<script src="[^"]*(?:searchtools|language_data|searchindex)\.js"></script>\s*')


def without_fontawesome_js(html: str) -> Markup:
    return Markup(FONTAWESOME_JS.sub("", str(html)))


def without_search_scripts(html: str) -> Markup:
    return Markup(SEARCH_SCRIPTS.sub("", str(html)))


def each_script_once(app, pagename, templatename, context, doctree) -> None:
    """The page's scripts without repeats: the same file or inline body with the same
    attributes (an inline script added once as ``None`` and once as ``""``, which Sphinx keeps
    apart, is one script). The list is changed in place: it is the builder's own."""
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, kept = set(), []
    for js in scripts:
        key = (js.filename or "", js.priority, tuple(sorted(js.attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def add_templates(app, config) -> None:
    config.templates_path = [str(TEMPLATES), *config.templates_path]


def add_filter_and_font_css(app) -> None:
    if hasattr(app.builder, "templates"):
        filters = app.builder.templates.environment.filters
        filters["without_fontawesome_js"] = without_fontawesome_js
        filters["without_search_scripts"] = without_search_scripts
        app.add_css_file(SUBSET_CSS)


def icons_in_use(outdir: Path) -> set[int]:
    """The code points of every icon a built page or a theme script or stylesheet can show."""
    static = outdir / "_static"
    stylesheets = [p.read_text(encoding="utf-8") for p in static.rglob("*.css")]
    named = set()
    for path in [*outdir.rglob("*.html"), *static.rglob("*.js")]:
        if "mathjax" not in path.parts and "plotly" not in path.name:
            named |= set(ICON_CLASS.findall(path.read_text(encoding="utf-8", errors="ignore")))
    points = set()
    for css in stylesheets:
        for selectors, point in CLASS_RULE.findall(css):
            if named & {s.split(":")[0][1:] for s in selectors.split(",") if s}:
                points.add(int(point, 16))
        for found in PRIVATE_USE.finditer(CLASS_RULE.sub("", css)):
            escape = found.group(1)
            points.add(int(escape, 16) if escape else ord(found.group(0)))
    return points


def subset_fonts(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    points = icons_in_use(Path(app.outdir))
    rules = []
    for name, family, weight in FONTS:
        options = subset.Options()
        options.flavor = "woff"  # zlib-compressed; woff2 would need the brotli package
        font = subset.load_font(str(static / WEBFONTS / f"{name}.ttf"), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=points)
        subsetter.subset(font)
        subset.save_font(font, str(static / WEBFONTS / f"{name}-subset.woff"), options)
        rules.append(f'@font-face {{ font-family: "{family}"; font-style: normal; '
                     f'font-weight: {weight}; font-display: block; '
                     f'src: url("{WEBFONTS}/{name}-subset.woff") format("woff"); }}')
    header = "/* Font Awesome cut to the icons this book shows (book/_ext/light_pages.py) */\n"
    (static / SUBSET_CSS).write_text(header + "\n".join(rules) + "\n", encoding="utf-8")


def setup(app):
    app.connect("config-inited", add_templates)
    app.connect("builder-inited", add_filter_and_font_css)
    app.connect("html-page-context", each_script_once, priority=900)  # after the others
    app.connect("build-finished", subset_fonts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
