"""mha: the shared implementations of the course "Multi-head attention, hands-on".

Each module holds one idea; notebooks build the idea in the open, check it equals the version
here, and use this one from then on.
"""

# Chapter 1: scaled dot-product attention
from mha.attention import attention
from mha.scoring import AdditiveScore, additive_scores

# Chapter 2: self-attention without weights
from mha.attention import self_attention
from mha.diagonal import diagonal_violations

# Chapter 3: one head with its own projections
from mha.lookup_task import LookupModel, lookup_task, relative_error, train_lookup
from mha.single_head import SelfAttention

# Chapter 4: multi-head attention
from mha.multi_head import MultiHeadAttention
from mha.split_input import SplitInputAttention
from mha.kv_cache import KVCache

# Chapter 5: convolution as attention
from mha.convolution import (
    GridSelfAttention,
    conv_to_attention,
    quadratic_encoding,
    relative_scores,
)

# Chapter 6: positions, and what attention costs
from mha.positional import encoding_frequencies, relative_rotation, sinusoidal_encoding
from mha.rotary import RotaryMultiHeadAttention, apply_rotary
from mha.alibi import alibi_bias, alibi_slopes
from mha.chunked import chunked_attention
from mha import cost, measure, position_task

# Chapter 7: head importance and pruning
from mha.pruning import head_importance, prune_heads
from mha.head_roles import head_confidence, positional_heads, relative_offsets
from mha.encoder import EncoderBlock, TinyEncoder
from mha.neighbour_task import lookup_batch, lookup_targets, token_accuracy
from mha.pruning_curves import iterative_pruning_order, masks_along, pruning_curve, pruning_order
from mha.hard_concrete import HardConcreteGates, hard_concrete_sample, prob_nonzero
from mha.content_heads import same_token_weight

# Lab (notebook 08): a pretrained encoder built on MultiHeadAttention
from mha import pretrained
from mha.bootstrap import spearman_difference_bootstrap

# Chapter 9: multi-head attention in today's decoders
from mha.text_corpus import text_splits
from mha.decoder import DecoderBlock, TinyDecoder, bits_per_byte, generate, train_decoder
from mha.kv_sharing import pool_kv_heads, repeat_kv
from mha.latent_attention import LatentCache, MultiHeadLatentAttention
from mha.trained_models import (
    build_decoder,
    build_lookup_encoder,
    build_translator,
    load_decoder,
    load_lookup_encoder,
    load_translator,
    train_lookup_encoder,
)
from mha.seq2seq import TinyTranslator, translation_batch, translation_dictionary

# Every chapter: data-flow pictures with shapes, and the interactive attention explorer
from mha import dataflow
from mha.diagrams import Diagram, Notation
from mha.explorer import attention_explorer

# Argument checks: the memory budget every allocation of mha is checked against
from mha._checks import (
    MemoryBudgetError,
    get_debug,
    get_memory_budget,
    memory_budget,
    set_debug,
    set_memory_budget,
)

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
    "dataflow",
    "Diagram",
    "Notation",
    "attention_explorer",
]
