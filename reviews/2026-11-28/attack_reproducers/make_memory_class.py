"""One sandbox holds more memory than the advertised 6 GB: RLIMIT_AS is per process and there
is no memory cgroup, so N processes x (6 GB - torch) each add up (64 processes allowed).
The answer to 0.2 is right only if 4 forked children held 1.75 GB each *at the same time*
(7 GB, above the per-process 6 GB), so 0.2's point proves it. (Kept at 7 GB on purpose: this
machine is shared; 64 x 5 GB would OOM any grading machine.)

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/make_memory_class.py CLASS
     .venv/bin/mha-grade grade CLASS --source tests/fixtures/00_example_exercises.ipynb \
         --jobs 1 --no-calibrate
"""
import json
import sys
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from exercise_notebooks import EXAMPLE, fmt, student_edition  # noqa: E402

BOMB = r'''
import os, time
CHILDREN, SIZE = 4, 1750 * 2**20
read, write = os.pipe()
pids = []
for _ in range(CHILDREN):
    pid = os.fork()
    if pid == 0:
        try:
            block = b"\x01" * SIZE  # touched: resident, not just reserved
            os.write(write, b"+")
            time.sleep(4)
        finally:
            os._exit(0)
    pids.append(pid)
os.close(write)
held = b""
deadline = time.time() + 60
while len(held) < CHILDREN and time.time() < deadline:
    chunk = os.read(read, CHILDREN)
    if not chunk:
        break
    held += chunk
for pid in pids:
    os.waitpid(pid, 0)
HELD = len(held)

def scaled_scores(q, k):
    if HELD < CHILDREN:
        raise RuntimeError(f"only {HELD} children held their block")
    return q @ k.T / math.sqrt(q.shape[-1])
'''

out = Path(sys.argv[1])
nb = student_edition.student_edition(fmt.load(EXAMPLE))
cell = next(c for c in nb["cells"] if c["cell_type"] == "code"
            and "def scaled_scores" in "".join(c["source"]))
cell["source"] = BOMB
(out / "bomb").mkdir(parents=True, exist_ok=True)
(out / "bomb" / EXAMPLE.name).write_text(json.dumps(nb))
