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
