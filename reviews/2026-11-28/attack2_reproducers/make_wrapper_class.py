"""Round 4: attacks on the capturing wrapper (run_notebook.wrapper). Each student hands in the
instructor's solved example chapter plus one extra last cell:
- thread: a background thread calls 0.2's check with a wrong answer while later cells run;
- sigalrm: the wrong answer is passed from a SIGALRM handler the student installs;
- base_exc: 0.2's answer raises SystemExit / KeyboardInterrupt / GeneratorExit when called;
- closure: reaches the wrapper's closure (serve) without 'mha.checks.' in an unflagged form
  and swaps serve so the grader reads the reference's outputs for a wrong answer;
- recurse: the answer calls its own check while being served (busy) and recurses.

Run: cd /work/wt/attack2 && .venv/bin/python /work/wt/reviews-r3/attack2/make_wrapper_class.py CLASS
     .venv/bin/mha-grade grade CLASS --source tests/fixtures/00_example_exercises.ipynb --jobs 1 --no-calibrate
"""
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path.cwd() / "tests")]
from exercise_notebooks import EXAMPLE, fmt  # noqa: E402

WRONG = "lambda q, k: q @ k.T"
EXTRA = {
    "thread": "import threading, time\nfrom mha.checks import ch00\n"
              f"threading.Thread(target=lambda: (time.sleep(0.2), ch00.scaled_scores({WRONG})))"
              ".start()\ntime.sleep(1)\nx = 1",
    "sigalrm": "import signal\nfrom mha.checks import ch00\n"
               f"signal.signal(signal.SIGALRM, lambda *a: ch00.scaled_scores({WRONG}))\n"
               "signal.setitimer(signal.ITIMER_REAL, 0.1)\nimport time\ntime.sleep(1)",
    "base_exc": "from mha.checks import ch00\nn = [0]\n"
                "def bad(q, k):\n    n[0] += 1\n"
                "    raise [SystemExit, KeyboardInterrupt, GeneratorExit][n[0] % 3]()\n"
                "ch00.scaled_scores(bad)\nafter = 1",
    "closure": "from mha.checks import ch00\n"
               "cells = {c.cell_contents.__name__: c for c in ch00.scaled_scores.__closure__"
               " if callable(c.cell_contents)}\n"
               "inner = {c.cell_contents.__name__ if callable(c.cell_contents) else i: c for i, c"
               " in enumerate(cells['capture'].cell_contents.__closure__)}\n"
               "real = inner['serve'].cell_contents\n"
               "def fake(request, table):\n    return real(request, [scaled_scores])\n"
               "inner['serve'].cell_contents = fake\n"
               f"ch00.scaled_scores({WRONG})",
    "recurse": "from mha.checks import ch00\n"
               "def rec(q, k):\n    ch00.scaled_scores(rec)\n    return q @ k.T / math.sqrt(q.shape[-1])\n"
               "ch00.scaled_scores(rec)",
}
out = Path(sys.argv[1])
for who, extra in EXTRA.items():
    nb = fmt.load(EXAMPLE)
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    nb["cells"].append({"cell_type": "code", "source": extra, "metadata": {}, "outputs": [],
                        "execution_count": None})
    (out / who).mkdir(parents=True, exist_ok=True)
    (out / who / EXAMPLE.name).write_text(json.dumps(nb))
print(sorted(EXTRA))
