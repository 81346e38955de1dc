"""The old module paths of ``mha``, kept working through a DeprecationWarning.

Until 2026-11 every module sat directly in mha/ (``mha.multi_head``, ``from mha.pretrained
import load_minilm``), and argument validation was ``mha._checks``; readers' code and saved
notebooks use those paths. Each old path stays an alias of the module at its new home (one
module object, not a copy: ``import mha.multi_head`` gives ``mha.layers.multi_head`` itself),
and its first use, by import or as an attribute of ``mha``, warns with the new path.
``MOVED`` is the one table of old paths; tests import it.
"""

from __future__ import annotations

import sys
import warnings
from importlib import import_module
from importlib.abc import Loader, MetaPathFinder
from importlib.util import spec_from_loader
from types import ModuleType

# old name in mha -> the module's path now
MOVED: dict[str, str] = {
    "_checks": "mha._validation",
    **{name: f"mha.layers.{name}" for name in (
        "attention", "scoring", "single_head", "multi_head", "split_input", "kv_cache",
        "kv_sharing", "latent_attention", "rotary", "alibi", "positional", "chunked")},
    **{name: f"mha.tasks.{name}" for name in (
        "lookup_task", "neighbour_task", "position_task", "similarity_pairs", "text_corpus")},
    **{name: f"mha.analysis.{name}" for name in (
        "diagonal", "convolution", "pruning", "hard_concrete", "head_roles", "content_heads",
        "pruning_curves", "bootstrap", "cost", "measure")},
    **{name: f"mha.models.{name}" for name in (
        "encoder", "decoder", "seq2seq", "pretrained", "trained_models")},
    **{name: f"mha.figures.{name}" for name in ("dataflow", "explorer")},
}

# `mha.attention` and `mha.lookup_task` are functions, as they were before the move: importing
# their old module path through the finder would make the import system set the module over
# the function, so those two old paths are registered as they are, without a warning.
SAME_NAME_AS_A_FUNCTION = ("attention", "lookup_task")


def warn(old: str) -> None:
    """A DeprecationWarning naming the new path, attributed to the first caller outside this
    file, so that Python's default filter shows it in a reader's script or notebook. (The
    warnings module itself steps over the import machinery's frames, so they are not counted.)"""
    level, frame = 2, sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and not (name.startswith("<frozen importlib") or "importlib" in name
                                     and "_bootstrap" in name):
            break
        if name == __file__:
            level += 1
        frame = frame.f_back
    warnings.warn(f"mha.{old} is an old path: import {MOVED[old]} instead", DeprecationWarning,
                  stacklevel=level)


class _OldPaths(MetaPathFinder, Loader):
    """Imports ``mha.<old name>`` as the module at its new path, with a warning."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != "mha" or name not in MOVED:
            return None
        return spec_from_loader(fullname, self)

    def create_module(self, spec):
        name = spec.name.rpartition(".")[2]
        warn(name)
        module = import_module(MOVED[name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system has set the alias's spec on the module: give it back its own
        module.__spec__ = module.__spec__.loader_state


def old_attribute(name: str) -> ModuleType:
    """``mha.<old name>`` read as an attribute (the package's ``__getattr__``)."""
    if name not in MOVED:
        raise AttributeError(f"module 'mha' has no attribute {name!r}")
    warn(name)
    return import_module(MOVED[name])


def register() -> None:
    for name in SAME_NAME_AS_A_FUNCTION:
        sys.modules.setdefault(f"mha.{name}", import_module(MOVED[name]))
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())
