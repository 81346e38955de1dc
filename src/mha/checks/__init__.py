"""Exercise checks, one module per chapter: ``mha.checks.ch01`` and so on.

Each check is made with :func:`mha.exercises.exercise_check` and carries these attributes:

- ``exercise``: the exercise it grades (``"1.2"``), ``max_points``: its points;
- ``checker``: the function the grader runs in its own process;
- ``reference_names``: a tuple of strings, the dotted names under which ``import mha`` reaches
  the course's own implementations of what the answer must compute (the check's reference or
  its equivalent), e.g. ``("mha.repeat_kv", "mha.kv_sharing.repeat_kv")``: the top-level alias
  where ``mha`` re-exports one and the defining module's path, both spelled out; the check's
  own module (``"mha.checks.ch03"``) when no callable of ``mha`` solves the exercise. Never
  empty. Every call of the answer is watched at run time (``mha.answer_watch``) for these and
  for the helpers of the check's own module: what it enters is in the result's ``entered``,
  and the grader flags it for a human to look at (a flag, not a penalty). The grader also
  flags these names in the text of the exercise's solution cells (``mha_grade.flags``);
- ``forbidden_ops``: words of the torch operations the exercise forbids (``("softmax", ...)``
  for "without calling torch.softmax"), or overloads (``"pow.Scalar"``); an answer whose call
  runs one, however it calls it (``torch.softmax``, ``Tensor.softmax``, ``nn.Softmax``, torch's
  Python decomposition ``torch._refs.softmax``), gets that part wrong, and so does one that
  hands its tensors straight to NumPy or SciPy (``t.numpy()``, ``numpy.exp(t)``) or to Python
  element by element (``t.apply_(math.exp)``), where its ops cannot be seen. The check cannot
  see every way around: Python's own numbers (``t.tolist()``), NumPy reached by other routes
  (``map(torch.Tensor.numpy, [t])``), an exponential built from other functions. The
  exercise's prompt says exactly what the check refuses, and that such an answer passes the
  check but not the exercise.

How a check treats the answer (both in a notebook and under grading, see ``mha.exercises``): it
draws its inputs (from the hidden seed under grading), computes its reference and every expected
value first, from its own copies, then calls the answer, which receives copies sent as plain
data; nothing the answer does to them is read back into the check's values. No expected value
is sent to the answer's side, and a message says how a result is wrong ("too large by a factor
of 2", "softmax over the wrong axis"), never what a graded case's expected value is.
"""
