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
