"""One-off check (not a test): is a book page loaded at 1280 px and then resized to 400 px the
same, for what tests/test_book_in_browser.py measures, as the page loaded fresh at 400 px?

The tests ask for each page at 1280, then 400 (test_no_code_or_output_line_is_cut_off), then
1280 (the budget, the chart and the claim-card tests), then 400 (the figure test); with
``open_page`` resizing one page, every step after the first is a resize. So for every page:

    fresh 400                    == 1280 -> 400 == 1280 -> 400 -> 1280 -> 400
    fresh 1280                   == 1280 -> 400 -> 1280

for: CUT_OFF, the figure list of test_figure_text_is_at_least_9_px_high_on_a_phone, CLAIM_CARDS,
document scrollWidth, the width of every mjx-container, and, as stronger evidence, the box of
every element of <main>, the figures marked as scrolling (course.js), the files loaded (not
images; the budget test counts them) and the script errors.

Run from the worktree after `make book`:
    .venv/bin/python reviews/2026-11-28/resize_equivalence.py
"""

import functools
import http.server
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from test_book_in_browser import (  # noqa: E402
    CHROMIUM,
    CLAIM_CARDS,
    CUT_OFF,
    HTML,
    PAGES,
    QuietHandler,
    new_page,
    set_width,
)

FIGURES = """() => [...document.querySelectorAll('main .cell_output img')]
    .filter(i => i.offsetParent !== null && i.src.endsWith('.png'))
    .map(i => [i.src, i.naturalWidth, i.getBoundingClientRect().width])"""
# each formula's width, and where it is: the article, or the theme's sidebars (the secondary
# sidebar's "contents" lists headings, some with a formula)
MATHS = """() => [...document.querySelectorAll('mjx-container')].map(m => [
    m.closest('main article') ? 'article' : m.closest('.bd-sidebar-secondary') ? 'contents'
        : m.closest('.bd-sidebar-primary') ? 'navigation' : 'other',
    m.getBoundingClientRect().width])"""
BOXES = """() => [...document.querySelectorAll('main *')].map(e => {
    const r = e.getBoundingClientRect();
    return [e.tagName, r.x, r.y, r.width, r.height].join(' ');
})"""
SCROLLING = """() => [...document.querySelectorAll('main .figure-scrolls')].length"""


def measure(page, server):
    has_cards = page.evaluate("() => !!document.querySelector('main article')")
    return {
        "CUT_OFF": page.evaluate(CUT_OFF),
        "figures": page.evaluate(FIGURES),
        "claim cards": page.evaluate(CLAIM_CARDS) if has_cards else None,
        "scrollWidth": page.evaluate("() => document.documentElement.scrollWidth"),
        "mjx widths": page.evaluate(MATHS),
        "boxes in main": page.evaluate(BOXES),
        "figures marked scrolling": page.evaluate(SCROLLING),
        "files loaded (not images)": sorted({u for u, kind in page.loaded
                                             if u.startswith(server) and kind != "image"}),
        "script errors": list(page.script_errors),
    }


def differences(a, b):
    out = []
    for key in a:
        if a[key] != b[key]:
            if key in ("boxes in main", "mjx widths") and len(a[key]) == len(b[key]):
                pairs = [(i, x, y) for i, (x, y) in enumerate(zip(a[key], b[key], strict=True))
                         if x != y]
                out.append(f"{key}: {len(pairs)} of {len(a[key])} differ, first: {pairs[:4]}")
            else:
                out.append(f"{key}: {str(a[key])[:150]} != {str(b[key])[:150]}")
    return out


def main():
    from playwright.sync_api import sync_playwright

    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = f"http://127.0.0.1:{httpd.server_address[1]}"
    ok = True
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])

        def fresh(path, width):
            page = new_page(browser, server, path, width, False)
            found, keeps = measure(page, server), page.keeps_its_width
            page.close()
            return found, keeps

        for path in PAGES:
            fresh_400, _ = fresh(path, 400)
            control_400, _ = fresh(path, 400)  # the noise: fresh against fresh
            fresh_1280, _ = fresh(path, 1280)
            control_1280, _ = fresh(path, 1280)
            page = new_page(browser, server, path, 1280, False)
            set_width(page, 400)
            resized_400 = measure(page, server)
            set_width(page, 1280)
            back_1280 = measure(page, server)
            set_width(page, 400)
            again_400 = measure(page, server)
            keeps = page.keeps_its_width
            page.close()
            controls = {"fresh 400 twice": differences(fresh_400, control_400),
                        "fresh 1280 twice": differences(fresh_1280, control_1280)}
            resized = {"1280->400": differences(fresh_400, resized_400),
                       "1280->400->1280": differences(fresh_1280, back_1280),
                       "1280->400->1280->400": differences(fresh_400, again_400)}
            same = not any(resized.values())
            # the tests resize a page only when it does not keep its width: it must be the same
            ok &= not any(controls.values()) and (keeps or same)
            print(f"{path:42} {'keeps its width (loaded per width)' if keeps else 'resized':34}"
                  f" {'same' if same else 'DIFFERENT'}"
                  f"  (at 400 px: {len(fresh_400['mjx widths'])} formulas,"
                  f" {len(fresh_400['figures'])} figures, {len(fresh_400['boxes in main'])}"
                  f" boxes, scrollWidth {fresh_400['scrollWidth']})", flush=True)
            for history, found in {**controls, **resized}.items():
                for d in found:
                    print(f"    {history}: {d}")
        browser.close()
    httpd.shutdown()
    print("every page the tests resize is the same as loaded at that width, at every step"
          if ok else "A PAGE THE TESTS RESIZE DIFFERS (or a control differs)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
