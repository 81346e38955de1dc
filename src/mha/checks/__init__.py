"""Exercise checks, one module per chapter: ``mha.checks.ch01`` and so on.

Each check is made with :func:`mha.exercises.exercise_check` and carries these attributes:

- ``exercise``: the exercise it grades (``"1.2"``), ``max_points``: its points;
- ``checker``: the function the grader runs in its own process;
- ``reference_names``: a tuple of strings, the dotted names under which ``import mha`` reaches
  the course's own implementations of what the answer must compute (the check's reference or
  its equivalent), e.g. ``("mha.repeat_kv", "mha.kv_sharing.repeat_kv")``: the top-level alias
  where ``mha`` re-exports one and the defining module's path, both spelled out. Empty when no
  callable of ``mha`` solves the exercise (a construction, or a class the exercise asks the
  answer to build). The grader flags, for a human to look at, an exercise whose own solution
  cells use one of these names (matched as ``mha.x.y``, or ``x.y`` / ``y`` after a ``from mha...
  import``); it is a flag, not a penalty, and only those cells count: elsewhere in a chapter
  ``mha.attention`` and the rest are the course's tools.

How a check treats the answer (both in a notebook and under grading, see ``mha.exercises``): it
draws its inputs (from the hidden seed under grading), computes its reference and every expected
value first, from its own copies, then calls the answer, which receives copies sent as plain
data; nothing the answer does to them is read back into the check's values. No expected value
is sent to the answer's side, and a message says how a result is wrong ("too large by a factor
of 2", "softmax over the wrong axis"), never what a graded case's expected value is.
"""
