"""The package's own docstring: ``help(mha)`` opens with a quick start that runs, then the
conventions."""

import doctest
import pydoc

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
    """Every public function and class of ``mha``, and the public methods and properties of
    its classes, as ``(name, object)``."""
    import inspect

    for name in mha.__all__:
        obj = getattr(mha, name)
        if inspect.ismodule(obj) or not callable(obj):
            continue
        yield name, obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (callable(member) or isinstance(
                        member, property | classmethod | staticmethod)):
                    yield f"{name}.{attr}", getattr(obj, attr)


def test_every_public_callable_has_a_docstring():
    missing = [name for name, obj in public_callables() if not (obj.__doc__ or "").strip()]
    assert not missing, missing


ATTENTION_CALLS = [mha.MultiHeadAttention.forward, mha.MultiHeadLatentAttention.forward,
                   mha.RotaryMultiHeadAttention.forward, mha.apply_rotary, mha.KVCache.append,
                   mha.TinyDecoder.forward, mha.generate, mha.attention_explorer]


def test_the_attention_calls_say_what_raises():
    silent = [f.__qualname__ for f in ATTENTION_CALLS if "Raises" not in (f.__doc__ or "")]
    assert not silent, silent
