"""Count what the bad-input table (tests/bad_inputs.py) gives, for any version of ``mha``.

    .venv/bin/python tools/bad_input_tally.py                  # this checkout's src/
    .venv/bin/python tools/bad_input_tally.py --src OTHER/src  # e.g. an old commit's src/
    .venv/bin/python tools/bad_input_tally.py --table bad_inputs_decoding  # another table
    .venv/bin/python tools/bad_input_tally.py --table generated_bad_inputs  # the generated suite
    git archive main src | tar -x -C /tmp/old && \\
        .venv/bin/python tools/bad_input_tally.py --src /tmp/old/src

Every row runs in one child process whose address space is capped (``--memory``, GiB) and
whose rows each have ``--timeout`` seconds, so that an old version that allocates without
asking cannot take the machine down. Each row's outcome is one of:

- ``clear error``: the expected error class, its message naming the argument (the row's first
  word; the test asks for all the row's words);
- ``documented result``: a row that expects a result, and the result is the documented one;
- ``cryptic error``: any other exception (another class, or a message without the words);
- ``silent NaN``: a result with NaN where an error or another result was due;
- ``silently wrong``: any other result where an error or another result was due;
- ``huge allocation``: the row hit the memory cap or the time limit (what would stall or
  crash a laptop).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = ("clear error", "documented result", "cryptic error", "silent NaN",
            "silently wrong", "huge allocation")

_CHILD = r"""
import json, resource, signal, sys
cap, timeout, table = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

import torch
torch.set_num_threads(1)
import mha
import importlib
CASES = importlib.import_module(table).CASES


class Timeout(Exception):
    pass


def alarm(*_):
    raise Timeout()


signal.signal(signal.SIGALRM, alarm)


def has_nan(result):
    if isinstance(result, torch.Tensor):
        return result.is_floating_point() and result.device.type != "meta" \
            and bool(result.isnan().any())
    if isinstance(result, (tuple, list)):
        return any(has_nan(r) for r in result)
    if isinstance(result, float):
        return result != result
    return False


def outcome(case):
    signal.alarm(timeout)
    try:
        result = case.call()
    except Timeout:
        return "huge allocation", "timeout"
    except MemoryError as error:
        if not str(error) or "budget" not in str(error):
            return "huge allocation", f"MemoryError: {error}"[:300]
        raised = error
    except Exception as error:
        raised = error
        if isinstance(error, RuntimeError) and "alloc" in str(error).lower():
            return "huge allocation", f"{type(error).__name__}: {error}"[:300]
    else:
        raised = None
    finally:
        signal.alarm(0)
    if raised is not None:
        text = f"{type(raised).__name__}: {raised}"[:300]
        if hasattr(case, "is_clear"):  # a generated row brings its own rule
            return ("clear error" if case.is_clear(raised) else "cryptic error"), text
        # the argument's name (the row's first word) must be in the message
        words_ok = not case.words or case.words[0].lower() in str(raised).lower()
        if case.error is not None and isinstance(raised, case.error) and words_ok:
            return "clear error", text
        return "cryptic error", text
    if case.error is None or hasattr(case, "is_clear"):  # a generated row may give either
        try:
            if case.check(result):
                return "documented result", ""
        except Exception as error:
            return "silently wrong", f"check failed: {type(error).__name__}: {error}"[:300]
    return ("silent NaN" if has_nan(result) else "silently wrong"), repr(type(result))


for case in CASES:
    kind, detail = outcome(case)
    print(json.dumps({"id": case.id, "outcome": kind, "detail": detail}), flush=True)
"""


def run(src: Path, memory_gib: float, timeout: int, table: str = "bad_inputs") -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT / "tests")]))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(int(memory_gib * 2**30)), str(timeout), table],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="folder holding mha/")
    parser.add_argument("--memory", type=float, default=6.0, help="address-space cap, GiB")
    parser.add_argument("--timeout", type=int, default=30, help="seconds per row")
    parser.add_argument("--table", default="bad_inputs",
                        help="module in tests/ whose CASES to run (e.g. bad_inputs_decoding)")
    parser.add_argument("--json", type=Path, help="also write every row's outcome here")
    parser.add_argument("--show", nargs="*", default=[], help="list the rows of these outcomes")
    args = parser.parse_args()
    rows = run(args.src.resolve(), args.memory, args.timeout, args.table)
    counts = Counter(row["outcome"] for row in rows)
    for outcome in OUTCOMES:
        print(f"{outcome:18s} {counts[outcome]:4d}")
    print(f"{'total':18s} {len(rows):4d}")
    for row in rows:
        if row["outcome"] in args.show:
            print(f"  {row['outcome']:16s} {row['id']:45s} {row['detail'][:150]}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
