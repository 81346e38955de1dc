"""The package's own docstring: ``help(mha)`` opens with a quick start that runs, then the
conventions."""

import doctest
import inspect
import pydoc
import re

import torch

import mha


def test_quick_start_in_the_package_docstring_runs_as_written():
    torch.manual_seed(0)
    parser = doctest.DocTestParser()
    test = parser.get_doctest(mha.__doc__, {}, "mha", None, 0)
    assert len(test.examples) >= 8
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_help_opens_with_the_quick_start_and_the_conventions():
    text = pydoc.render_doc(mha, renderer=pydoc.plaintext)
    opening = "\n".join(text.splitlines()[:60])
    for words in ["Quick start", "mha.MultiHeadAttention(embed_dim=16, num_heads=4)",
                  "batch first", "True = may attend", "ValueError"]:
        assert words in opening, words


def public_callables():
    """Every public function and class of ``mha`` and of its public submodules (the modules in
    ``mha.__all__``, such as ``mha.cost``), and the public methods and properties of those
    classes, as ``(name, object)``: derived here, so a new public name is covered."""
    for name in mha.__all__:
        obj = getattr(mha, name)
        if inspect.ismodule(obj):
            for inner in getattr(obj, "__all__", None) or vars(obj):
                member = getattr(obj, inner)
                if (not inner.startswith("_") and callable(member)
                        and not inspect.ismodule(member)
                        and getattr(member, "__module__", None) == obj.__name__):
                    yield from callable_and_members(f"{name}.{inner}", member)
        elif callable(obj):
            yield from callable_and_members(name, obj)


def callable_and_members(name, obj):
    yield name, obj
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            if not attr.startswith("_") and (callable(member) or isinstance(
                    member, property | classmethod | staticmethod)):
                yield f"{name}.{attr}", getattr(obj, attr)


def test_public_callables_cover_the_submodules_and_methods():
    names = dict(public_callables())
    for expected in ["attention", "MultiHeadAttention.forward", "KVCache.nbytes",
                     "LatentCache.append", "cost.attention_flops", "pretrained.load_minilm",
                     "dataflow.multi_head_figure", "position_task.previous_token_batch"]:
        assert expected in names, expected
    assert len(names) > 140


def test_every_public_callable_has_a_docstring():
    missing = [name for name, obj in public_callables() if not (obj.__doc__ or "").strip()]
    assert not missing, missing


def test_every_public_callable_says_what_it_raises():
    """A "Raises" sentence or section: the exceptions, or "Raises nothing of its own"."""
    silent = [name for name, obj in public_callables() if "Raises" not in (obj.__doc__ or "")]
    assert not silent, silent


SHAPE = re.compile(r"\([^()]*[,.][^()]*\)|\bscalar\b|\bshape\b|0-d|\b[1-4]-D\b")
DTYPE = re.compile(r"float|bool|int64|int32|integer|\blong\b|dtype|complex", re.IGNORECASE)


def takes_or_returns_tensors(obj) -> bool:
    """Whether ``obj``'s annotations (of a property: its getter's) name ``torch.Tensor``."""
    function = obj.fget if isinstance(obj, property) else obj
    if inspect.isclass(function):
        return False  # the constructor; its tensors (if any) are the methods' business
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    annotations = [p.annotation for p in signature.parameters.values()]
    annotations.append(signature.return_annotation)
    return any("Tensor" in (a if isinstance(a, str) else repr(a)) for a in annotations
               if a is not inspect.Parameter.empty)


def test_a_callable_on_tensors_gives_their_shapes_and_dtypes():
    vague = [name for name, obj in public_callables() if takes_or_returns_tensors(obj)
             and not (SHAPE.search(obj.__doc__ or "") and DTYPE.search(obj.__doc__ or ""))]
    assert not vague, vague


def test_the_shape_and_dtype_check_can_fail():
    def vague(x: torch.Tensor) -> torch.Tensor:
        """Returns x. Raises nothing of its own."""
    def exact(x: torch.Tensor) -> torch.Tensor:
        """``x``: any floating ``(B, n)``. Raises nothing of its own."""
    assert takes_or_returns_tensors(vague) and not SHAPE.search(vague.__doc__)
    assert SHAPE.search(exact.__doc__) and DTYPE.search(exact.__doc__)
