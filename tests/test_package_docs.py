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
