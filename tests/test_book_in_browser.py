"""The built book as a reader sees it, in a real browser (Debian's chromium via Playwright).

`make test` builds the book first; these tests open every page of _build/html over a local HTTP
server with the network otherwise unused, and save a screenshot per page to _build/screenshots/
(the first screen of each page; `SCREENSHOTS=full` saves whole pages, which takes a minute more).
"""

import functools
import http.server
import os
import shutil
import threading

import pytest

from conventions import NOTEBOOKS, ROOT, book_config

HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHAPTERS = [f"notebooks/{p.stem}.html" for p in NOTEBOOKS]
BOOK_PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "book").glob("*.ipynb"))
PAGES = CHAPTERS + [f"book/{p.stem}.html" for p in BOOK_PAGES]
EXPLORER = "book/attention_explorer.html"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FULL_PAGE = os.environ.get("SCREENSHOTS") == "full"  # rendering a long chapter whole takes seconds

# the text a reader sees outside code: raw TeX delimiters there mean MathJax did not typeset it
VISIBLE_PROSE = """() => {
  const article = document.querySelector('main article') || document.body;
  const copy = article.cloneNode(true);
  copy.querySelectorAll('pre, code, .highlight, mjx-container, script, style, .cell_output')
      .forEach(e => e.remove());
  return copy.innerText;
}"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make book` (make test builds it first)")
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `apt-get install chromium` (.ci/run does this)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def open_page(server, browser):
    """``open_page(path, width, dark)``: the page, loaded and typeset once per module and shared
    by every test that only reads it (a page of a long chapter takes seconds to typeset)."""
    shared, opened = {}, []

    def load(path, width=1280, dark=False, fresh=False):
        """``fresh``: a page of its own, for a test that changes it (clicks a menu)."""
        if not fresh and (path, width, dark) in shared:
            return shared[path, width, dark]
        page = browser.new_page(viewport={"width": width, "height": 900},
                                color_scheme="dark" if dark else "light")
        if dark:  # the theme's own switch, as a reader's click on it leaves it
            page.add_init_script("localStorage.setItem('mode', 'dark')")
        outside = []
        page.on("request", lambda r: outside.append(r.url)
                if not r.url.startswith((server, "data:", "blob:")) else None)
        page.goto(f"{server}/{path}", wait_until="load")
        # Sphinx adds MathJax only to pages with maths; it typesets after load: wait for it
        page.has_maths = page.locator('script[src*="mathjax"]').count() > 0
        if page.has_maths:
            page.wait_for_function("() => window.MathJax && window.MathJax.startup"
                                   " && window.MathJax.startup.promise", timeout=20_000)
            page.evaluate("() => window.MathJax.startup.promise")
        page.outside_requests = outside
        opened.append(page)
        if not fresh:
            shared[path, width, dark] = page
        return page

    yield load
    for page in opened:
        page.close()


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_maths_offline_and_images(open_page, path):
    page = open_page(path)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / (path.replace("/", "_").replace(".html", ".png"))),
                    full_page=FULL_PAGE)
    prose = page.evaluate(VISIBLE_PROSE)
    for raw in ["$$", "\\(", "\\[", "\\begin{"]:
        assert raw not in prose, f"untypeset maths ({raw!r}) in {path}"
    if page.has_maths:
        assert page.evaluate("() => window.MathJax.version").startswith("3.")
    broken = page.evaluate("""() => [...document.images]
        .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)""")
    assert not broken, f"images that did not load: {broken}"
    assert page.outside_requests == [], f"{path} loads from the network"


@pytest.mark.parametrize("path", CHAPTERS)
def test_chapter_has_typeset_maths_numbered_figures_and_launch_buttons(open_page, path):
    page = open_page(path)
    assert page.has_maths and page.locator("mjx-container").count() > 0, "no typeset formula"
    images = page.locator("figure img")
    for i in range(images.count()):
        assert images.nth(i).get_attribute("alt"), f"figure {i + 1} has no alt text"
    repo = book_config()["repository"]["url"].removeprefix("https://github.com/")
    notebook = path.replace(".html", ".ipynb")
    # the buttons open the Jupyter edition, on its own branch (book/_ext/jupyter_launch.py)
    edition = book_config()["sphinx"]["config"]["jupyter_edition_branch"]
    colab = f"https://colab.research.google.com/github/{repo}/blob/{edition}/{notebook}"
    assert page.locator(f'a[href="{colab}"]').count() == 1, "no Colab button for this notebook"
    binder = page.locator(f'a[href^="https://mybinder.org/v2/gh/{repo}/{edition}?"]')
    assert binder.count() == 1 and notebook in binder.get_attribute("href")


@pytest.mark.parametrize("path", CHAPTERS)
def test_exercises_are_shown_and_solutions_folded(open_page, path):
    page = open_page(path)
    exercises = page.locator(".exercise")
    solutions = page.locator(".solution")
    assert exercises.count() >= 4, f"{path} has {exercises.count()} exercises"
    assert solutions.count() >= 1
    for i in range(solutions.count()):
        body = solutions.nth(i).locator(":scope > :not(.admonition-title)")
        for j in range(body.count()):
            assert not body.nth(j).is_visible(), f"solution {i + 1} of {path} is not folded"


def chart_png(page, selector=".mha-plotly") -> bytes:
    page.wait_for_timeout(300)  # let Plotly finish its transition
    return page.locator(selector).first.screenshot()


def test_attention_explorer_draws_offline_and_its_menus_change_the_picture(open_page):
    page = open_page(EXPLORER, fresh=True)  # its menus are clicked below
    chart = page.locator(".mha-plotly .main-svg").first
    chart.wait_for(timeout=30_000)  # plotly.js (deferred, 4.8 MB) has drawn the chart
    assert page.locator(".mha-plotly").count() == 1
    assert page.evaluate("() => typeof window.Plotly") == "object"
    assert page.locator(".mha-plotly g.heatmaplayer image").count() >= 12  # one per head
    grid = chart_png(page)

    page.locator(".mha-plotly .updatemenu-header").nth(0).click()  # the head menu
    page.locator(".mha-plotly .updatemenu-dropdown-button", has_text="head 3").first.click()
    one_head = chart_png(page)
    assert one_head != grid, "choosing a head did not change the picture"
    layout = page.evaluate("() => document.querySelector('.mha-plotly').layout")
    assert layout["xaxis3"]["domain"] == [0, 1] and layout["xaxis3"]["visible"]
    assert layout["xaxis"]["domain"][1] <= 0.001

    page.locator(".mha-plotly .updatemenu-header").nth(1).click()  # the layer menu
    page.locator(".mha-plotly .updatemenu-dropdown-button", has_text="layer 5").first.click()
    assert chart_png(page) != one_head, "choosing a layer did not change the picture"
    visible = page.evaluate(
        "() => document.querySelector('.mha-plotly').data.map(t => t.visible)")
    assert visible == [i // 12 == 4 for i in range(72)]

    # hovering a cell of the large head names its query, its key and the weight
    box = page.locator(".mha-plotly .nsewdrag[data-subplot='x3y3']").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.5)
    page.wait_for_timeout(300)
    hover = page.evaluate("() => document.querySelector('.mha-plotly .hoverlayer').textContent")
    assert "layer 5, head 3" in hover and "query" in hover and "weight" in hover
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "book_attention_explorer_hover.png"), full_page=FULL_PAGE)
    assert page.outside_requests == [], "the explorer loads from the network"


# at both widths: every pre's content fits its box (lines wrap); the page never scrolls sideways;
# a display formula too wide for the column scrolls inside its own box
CUT_OFF = """() => {
  const visible = e => e.offsetParent !== null;
  const pres = [...document.querySelectorAll('main pre')].filter(visible)
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => p.textContent.split('\\n').reduce((a, l) => l.length > a.length ? l : a, ''));
  const maths = [...document.querySelectorAll('main mjx-container[display="true"]')]
    .filter(visible).filter(m => m.scrollWidth > m.clientWidth + 1)
    .filter(m => !['auto', 'scroll'].includes(getComputedStyle(m).overflowX))
    .map(m => m.textContent.slice(0, 60));
  return {pres, maths, page: document.documentElement.scrollWidth - window.innerWidth};
}"""


@pytest.mark.parametrize("width", [1280, 400])
@pytest.mark.parametrize("path", PAGES)
def test_no_code_or_output_line_is_cut_off(open_page, path, width):
    page = open_page(path, width=width)
    found = page.evaluate(CUT_OFF)
    assert found["pres"] == [], f"{path} at {width} px cuts off: {found['pres'][:3]}"
    assert found["maths"] == [], f"{path} at {width} px cuts off formulas: {found['maths'][:3]}"
    assert found["page"] <= 0, f"{path} at {width} px is {found['page']} px wider than the screen"


def luminance(css_colour: str) -> float:
    """Relative luminance (WCAG 2) of an "rgb(r, g, b)" or "rgba(...)" colour."""
    r, g, b = (int(v) / 255 for v in css_colour[css_colour.index("(") + 1:-1].split(",")[:3])
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("path", [CHAPTERS[3], EXPLORER])
def test_figures_read_in_dark_mode(open_page, path):
    page = open_page(path, dark=True)
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / path.replace("/", "_").replace(".html", "_dark.png")),
                    full_page=FULL_PAGE)
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert luminance(background) < 0.1
    # figures sit on a light panel (their own white backgrounds stay readable) ...
    panels = page.evaluate("""() => [...document.querySelectorAll('main .cell_output img')]
        .map(i => getComputedStyle(i).backgroundColor)""")
    assert panels and all(luminance(c) > 0.6 for c in panels), panels
    # ... and their captions read against the page (WCAG AA: contrast at least 4.5)
    captions = page.evaluate("""() => [...document.querySelectorAll('main figcaption')]
        .map(c => getComputedStyle(c).color)""")
    assert captions and all(contrast(c, background) >= 4.5 for c in captions), captions
