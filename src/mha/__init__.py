"""mha: the shared implementations of the course "Multi-head attention, hands-on".

Quick start (runs as a doctest: ``tests/test_package_docs.py``)::

    >>> import torch, mha
    >>> layer = mha.MultiHeadAttention(embed_dim=16, num_heads=4)
    >>> x = torch.randn(2, 5, 16)                          # (batch, tokens, features)
    >>> out, weights = layer(x, is_causal=True)
    >>> tuple(out.shape), tuple(weights.shape)             # weights (B, h, n_q, n_k)
    ((2, 5, 16), (2, 4, 5, 5))
    >>> may_attend = torch.ones(5, 5, dtype=torch.bool).tril()   # True = may attend
    >>> torch.allclose(layer(x, mask=may_attend)[0], out)
    True
    >>> cache = mha.KVCache()                              # incremental decoding
    >>> steps = [layer(x[:, i:i + 1], cache=cache, is_causal=True)[0] for i in range(5)]
    >>> torch.allclose(torch.cat(steps, dim=1), out, atol=1e-6)
    True
    >>> ours = mha.MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(16, 4))

Conventions, everywhere in ``mha``:

- batch first: tensors are ``(batch, tokens, features)``; attention weights are
  ``(batch, heads, n_q, n_k)``;
- boolean masks mean **True = may attend** (as ``scaled_dot_product_attention``); float masks
  are added to the scores. ``nn.MultiheadAttention``'s masks mean the opposite; its
  ``key_padding_mask`` is accepted with torch's meaning, under that name;
- layers, heads, queries, keys and positions count from 0;
- bad input raises ``ValueError`` (or ``TypeError``) naming the argument; a tensor over the
  memory budget raises :class:`MemoryBudgetError` before it is allocated
  (``with mha.memory_budget(nbytes):`` changes it for the calling thread); NaN and inf in the
  inputs reach the outputs they touch, never hidden;
- modules compile with ``torch.compile(fullgraph=True)`` (see :class:`MultiHeadAttention`).

Each module holds one idea; notebooks build the idea in the open, check it equals the version
here, and use this one from then on. The modules are grouped by role, each group importing only
the ones before it: `layers` (attention itself) <- `tasks` and `analysis` <- `models` <-
`figures` <- the course's `exercises` and `checks`; `_checks` (argument checks) and `diagrams`
(the drawing kit) sit beside this file and every group may use them.
"""

import sys as _sys
from importlib import import_module as _import_module
from importlib.abc import Loader as _Loader, MetaPathFinder as _MetaPathFinder
from importlib.util import spec_from_loader as _spec_from_loader

# Chapter 1: scaled dot-product attention
from mha.layers.attention import attention
from mha.layers.scoring import AdditiveScore, additive_scores

# Chapter 2: self-attention without weights
from mha.layers.attention import self_attention
from mha.analysis.diagonal import diagonal_violations

# Chapter 3: one head with its own projections
from mha.tasks.lookup_task import LookupModel, lookup_task, relative_error, train_lookup
from mha.layers.single_head import SelfAttention

# Chapter 4: multi-head attention
from mha.layers.multi_head import MultiHeadAttention
from mha.layers.split_input import SplitInputAttention
from mha.layers.kv_cache import KVCache

# Chapter 5: convolution as attention
from mha.analysis.convolution import (
    GridSelfAttention,
    conv_to_attention,
    quadratic_encoding,
    relative_scores,
)

# Chapter 6: positions, and what attention costs
from mha.layers.positional import encoding_frequencies, relative_rotation, sinusoidal_encoding
from mha.layers.rotary import RotaryMultiHeadAttention, apply_rotary
from mha.layers.alibi import alibi_bias, alibi_slopes
from mha.layers.chunked import chunked_attention
from mha.analysis import cost, measure
from mha.tasks import position_task

# Chapter 7: head importance and pruning
from mha.analysis.pruning import head_importance, prune_heads
from mha.analysis.head_roles import head_confidence, positional_heads, relative_offsets
from mha.models.encoder import EncoderBlock, TinyEncoder
from mha.tasks.neighbour_task import lookup_batch, lookup_targets, token_accuracy
from mha.analysis.pruning_curves import (
    iterative_pruning_order,
    masks_along,
    pruning_curve,
    pruning_order,
)
from mha.analysis.hard_concrete import HardConcreteGates, hard_concrete_sample, prob_nonzero
from mha.analysis.content_heads import same_token_weight

# Lab (notebook 08): a pretrained encoder built on MultiHeadAttention
from mha.models import pretrained
from mha.analysis.bootstrap import spearman_difference_bootstrap

# Chapter 9: multi-head attention in today's decoders
from mha.tasks.text_corpus import text_splits
from mha.models.decoder import DecoderBlock, TinyDecoder, bits_per_byte, generate, train_decoder
from mha.layers.kv_sharing import pool_kv_heads, repeat_kv
from mha.layers.latent_attention import LatentCache, MultiHeadLatentAttention
from mha.models.trained_models import (
    build_agreement_translator,
    build_decoder,
    build_lookup_encoder,
    build_translator,
    load_agreement_translator,
    load_decoder,
    load_lookup_encoder,
    load_translator,
    train_lookup_encoder,
)
from mha.models.seq2seq import (
    TinyTranslator,
    agreement_translation_batch,
    translation_batch,
    translation_dictionary,
)

# Every chapter: data-flow pictures with shapes, and the interactive attention explorer
from mha.figures import dataflow
from mha.diagrams import Diagram, Notation
from mha.figures.explorer import attention_explorer

# Argument checks: the memory budget every allocation of mha is checked against
from mha._checks import (
    MemoryBudgetError,
    get_debug,
    get_memory_budget,
    memory_budget,
    set_debug,
    set_memory_budget,
)

# The old flat paths. Until 2026-11 every module sat directly in mha/ (`mha.multi_head`,
# `from mha.pretrained import load_minilm`); readers' code and saved notebooks use those paths,
# so each old name stays an alias of the module's new home: `import mha.pretrained` gives
# `mha.models.pretrained` itself (one module object, not a copy). Modules this file has already
# imported are registered at once; the others (e.g. similarity_pairs) on first import, through
# `_OldPaths`, so `import mha` stays as cheap as before.
_MOVED = {
    "attention": "layers",
    "scoring": "layers",
    "single_head": "layers",
    "multi_head": "layers",
    "split_input": "layers",
    "kv_cache": "layers",
    "kv_sharing": "layers",
    "latent_attention": "layers",
    "rotary": "layers",
    "alibi": "layers",
    "positional": "layers",
    "chunked": "layers",
    "lookup_task": "tasks",
    "neighbour_task": "tasks",
    "position_task": "tasks",
    "similarity_pairs": "tasks",
    "text_corpus": "tasks",
    "diagonal": "analysis",
    "convolution": "analysis",
    "pruning": "analysis",
    "hard_concrete": "analysis",
    "head_roles": "analysis",
    "content_heads": "analysis",
    "pruning_curves": "analysis",
    "bootstrap": "analysis",
    "cost": "analysis",
    "measure": "analysis",
    "encoder": "models",
    "decoder": "models",
    "seq2seq": "models",
    "pretrained": "models",
    "trained_models": "models",
    "dataflow": "figures",
    "explorer": "figures",
}


class _OldPaths(_MetaPathFinder, _Loader):
    """Imports `mha.<old name>` as the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != "mha" or name not in _MOVED:
            return None
        return _spec_from_loader(fullname, self)

    def create_module(self, spec):
        name = spec.name.rpartition(".")[2]
        module = _import_module(f"mha.{_MOVED[name]}.{name}")
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system has set the alias's spec on the module: give it back its own
        module.__spec__ = module.__spec__.loader_state


def _register_old_paths() -> None:
    for name, group in _MOVED.items():
        module = _sys.modules.get(f"mha.{group}.{name}")
        if module is not None:
            _sys.modules.setdefault(f"mha.{name}", module)
            # `mha.attention` and `mha.lookup_task` are functions, as they were before the move
            globals().setdefault(name, module)
    if not any(isinstance(finder, _OldPaths) for finder in _sys.meta_path):
        _sys.meta_path.append(_OldPaths())


_register_old_paths()

__all__ = [
    "MemoryBudgetError",
    "memory_budget",
    "set_memory_budget",
    "get_memory_budget",
    "set_debug",
    "get_debug",
    "attention",
    "additive_scores",
    "AdditiveScore",
    "self_attention",
    "diagonal_violations",
    "SelfAttention",
    "lookup_task",
    "LookupModel",
    "train_lookup",
    "relative_error",
    "MultiHeadAttention",
    "SplitInputAttention",
    "KVCache",
    "GridSelfAttention",
    "conv_to_attention",
    "quadratic_encoding",
    "relative_scores",
    "encoding_frequencies",
    "sinusoidal_encoding",
    "relative_rotation",
    "apply_rotary",
    "RotaryMultiHeadAttention",
    "alibi_slopes",
    "alibi_bias",
    "chunked_attention",
    "cost",
    "measure",
    "position_task",
    "head_importance",
    "prune_heads",
    "head_confidence",
    "relative_offsets",
    "positional_heads",
    "EncoderBlock",
    "TinyEncoder",
    "lookup_batch",
    "lookup_targets",
    "token_accuracy",
    "pruning_order",
    "masks_along",
    "pruning_curve",
    "iterative_pruning_order",
    "HardConcreteGates",
    "hard_concrete_sample",
    "prob_nonzero",
    "same_token_weight",
    "pretrained",
    "spearman_difference_bootstrap",
    "text_splits",
    "DecoderBlock",
    "TinyDecoder",
    "bits_per_byte",
    "generate",
    "train_decoder",
    "pool_kv_heads",
    "repeat_kv",
    "LatentCache",
    "MultiHeadLatentAttention",
    "build_decoder",
    "load_decoder",
    "build_lookup_encoder",
    "load_lookup_encoder",
    "train_lookup_encoder",
    "build_translator",
    "load_translator",
    "TinyTranslator",
    "translation_batch",
    "translation_dictionary",
    "agreement_translation_batch",
    "build_agreement_translator",
    "load_agreement_translator",
    "dataflow",
    "Diagram",
    "Notation",
    "attention_explorer",
]
