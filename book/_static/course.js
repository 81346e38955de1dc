// Figures stay readable on a phone. A multi-panel figure 1100 px wide, shrunk to a 350 px
// screen, has 3 px text; on a narrow screen (course.css) each figure keeps at least
// READABLE_SCALE of its natural size and scrolls sideways inside its own box instead.
// At 100 dpi, matplotlib's default 10 pt text is 13.9 px, so 0.65 leaves it 9 px high
// (tests/test_book_in_browser.py measures this at 400 px).
const READABLE_SCALE = 0.65;

function keepFigureReadable(img) {
  const width = Math.round(img.naturalWidth * READABLE_SCALE);
  img.style.setProperty("--readable-width", `${width}px`);
  markScrolling(img);
}

// A figure that scrolls sideways gets a line saying so (course.css): nothing else shows it.
function markScrolling(img) {
  const box = img.parentElement;
  box.classList.toggle("figure-scrolls", box.scrollWidth > box.clientWidth + 1);
}

document.addEventListener("DOMContentLoaded", () => {
  const images = document.querySelectorAll("main .cell_output img");
  for (const img of images) {
    if (img.complete && img.naturalWidth > 0) keepFigureReadable(img);
    else img.addEventListener("load", () => keepFigureReadable(img));
  }
  window.addEventListener("resize", () => images.forEach(markScrolling));
});

// Long inline code (tests/test_x.py::test_what_it_checks, torch.nn.functional.scaled_dot_...)
// may break only where a name joins another: after "::", "_", "/" or ".". course.css lets such
// code wrap anywhere, which cut test names mid-word ("inclu" / "ding"); a <wbr> at each joint
// gives the browser better places to break (copying the text is unchanged).
const NAME_JOINT = /(::|[_/.])(?=[^_/.:])/g;
const MIN_BREAKABLE = 24;  // shorter code always fits a line

function breakAtJoints(span) {
  const text = span.textContent;
  if (text.length < MIN_BREAKABLE || span.children.length || !NAME_JOINT.test(text)) return;
  NAME_JOINT.lastIndex = 0;
  const parts = text.split(NAME_JOINT);  // [name, joint, name, joint, ...]
  span.textContent = "";
  for (let i = 0; i < parts.length; i += 2) {
    span.append(parts[i] + (parts[i + 1] || ""));
    if (i + 1 < parts.length) span.append(document.createElement("wbr"));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("main code.literal span.pre").forEach(breakAtJoints);
});

// Plotly charts (mha.explorer) are drawn with a white paper and dark text, which the notebooks'
// committed outputs keep. In the book's dark mode the chart gets a transparent background and
// the theme's colours instead, and follows the theme switch; in light mode it is as committed.
function chartColours(el) {
  if (!el._committedColours) {
    const l = el.layout;
    el._committedColours = {
      paper_bgcolor: l.paper_bgcolor, plot_bgcolor: l.plot_bgcolor,
      "font.color": l.font && l.font.color,
      menus: (l.updatemenus || []).map((m) => [m.bgcolor, m.bordercolor]),
    };
  }
  const committed = el._committedColours;
  if (document.documentElement.dataset.theme !== "dark") {
    const update = {paper_bgcolor: committed.paper_bgcolor, plot_bgcolor: committed.plot_bgcolor,
                    "font.color": committed["font.color"]};
    committed.menus.forEach(([bg, border], i) => {
      update[`updatemenus[${i}].bgcolor`] = bg ?? null;  // null: Plotly's default again
      update[`updatemenus[${i}].bordercolor`] = border ?? null;
    });
    return update;
  }
  const css = getComputedStyle(document.documentElement);
  const colour = (name) => css.getPropertyValue(name).trim();
  const update = {paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
                  "font.color": colour("--pst-color-text-base")};
  committed.menus.forEach((_, i) => {
    update[`updatemenus[${i}].bgcolor`] = colour("--pst-color-surface");
    update[`updatemenus[${i}].bordercolor`] = colour("--pst-color-border");
  });
  return update;
}

function themeChart(el) {
  if (!window.Plotly || !el.layout) return;  // not drawn (yet)
  const update = chartColours(el);
  const current = el.layout;
  const differs = Object.entries(update).some(([path, value]) => {
    const menu = path.match(/^updatemenus\[(\d+)\]\.(\w+)$/);
    const now = menu ? (current.updatemenus[menu[1]] || {})[menu[2]]
      : path === "font.color" ? current.font && current.font.color : current[path];
    return (now ?? null) !== (value ?? null);  // Plotly may hold an unset value as null
  });
  if (differs) window.Plotly.relayout(el, update);
}

function themeCharts() {
  document.querySelectorAll(".mha-plotly").forEach((el) => {
    if (el.on && !el._followsTheme) {  // a chart drawn later than "load" is themed as it draws
      el._followsTheme = true;
      el.on("plotly_afterplot", () => themeChart(el));
    }
    themeChart(el);
  });
}

// the charts draw on "load" (plotly.js is deferred): theme them after, and on every switch
window.addEventListener("load", () => setTimeout(themeCharts, 0));
new MutationObserver(themeCharts).observe(document.documentElement,
                                          {attributes: true, attributeFilter: ["data-theme"]});

// A table whose header row leaves its first cell empty (the first column names the rows, as in
// the instructors' comparison of graders) reads on a phone as one card per row, each value
// labelled with its column's header (course.css): four columns of a 400 px screen are 80 px
// each, a word a line, and the last column was off the screen.
document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("main table")) {
    const heads = [...table.querySelectorAll(":scope > thead > tr:first-child > th")];
    if (heads.length < 3 || heads[0].textContent.trim()) continue;
    table.classList.add("rows-as-cards");
    for (const row of table.querySelectorAll(":scope > tbody > tr")) {
      [...row.children].forEach((cell, i) => {
        if (i > 0 && heads[i]) cell.dataset.label = heads[i].textContent.trim();
      });
    }
  }
});
