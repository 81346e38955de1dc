"""Every wrong value of the generated suite (``tests/test_generated_bad_inputs.py``) as a table,
for ``tools/bad_input_tally.py --table generated_bad_inputs``.

The test draws up to ``EXAMPLES`` of each callable's wrong values with hypothesis; this table
lists all of them, so that the tally counts every one. A row is judged by the suite's rule
(``is_clear`` for an error, ``is_acceptable`` for a result), not by words of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from test_generated_bad_inputs import RECIPES, call_mutated, cases_of, is_acceptable, is_clear


@dataclass
class Generated:
    id: str
    name: str
    parameter: str
    kind: str
    error: tuple = (ValueError, TypeError)
    words: tuple[str, ...] = ()

    @property
    def call(self) -> Callable[[], object]:
        return lambda: call_mutated(self.name, self.parameter, self.kind)

    def is_clear(self, error: BaseException) -> bool:
        return is_clear(self.parameter, error)

    def check(self, result: object) -> bool:
        return is_acceptable(self.name, self.kind, result)


CASES = [Generated(f"{name}({parameter}={kind})", name, parameter, kind)
         for name in sorted(RECIPES) for parameter, kind in cases_of(name)]
