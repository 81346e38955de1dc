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
`figures` <- the course's `exercises` and `checks`; `_validation` (argument validation) and
`diagrams` (the drawing kit) sit beside this file and every group may use them.
"""

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

# Argument validation: the memory budget every allocation of mha is checked against
from mha._validation import (
    MemoryBudgetError,
    get_debug,
    get_memory_budget,
    memory_budget,
    set_debug,
    set_memory_budget,
)

# The old module paths (`mha.multi_head`, `mha._checks`) keep working, with a DeprecationWarning
# naming the new one (the table: mha._old_paths.MOVED)
from mha import _old_paths

_old_paths.register()
__getattr__ = _old_paths.old_attribute  # `mha.multi_head` read as an attribute


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
