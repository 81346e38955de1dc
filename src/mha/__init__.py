"""mha: the shared implementations of the course "Multi-head attention, hands-on".

Each module holds one idea; notebooks build the idea in the open, check it equals the version
here, and use this one from then on.
"""

# Chapter 1: scaled dot-product attention
from mha.attention import attention
from mha.scoring import AdditiveScore, additive_scores

# Chapter 2: self-attention without weights
from mha.attention import self_attention

# Chapter 3: one head with its own projections
from mha.single_head import SelfAttention

# Chapter 4: multi-head attention
from mha.multi_head import MultiHeadAttention

# Chapter 5: convolution as attention

# Chapter 6: positions

# Chapter 7: head importance and pruning
from mha.pruning import head_importance, prune_heads
from mha.head_roles import head_confidence, positional_heads, relative_offsets

# Lab (notebook 08): a pretrained encoder built on MultiHeadAttention
from mha import pretrained

__all__ = [
    "attention",
    "additive_scores",
    "AdditiveScore",
    "self_attention",
    "SelfAttention",
    "MultiHeadAttention",
    "head_importance",
    "prune_heads",
    "head_confidence",
    "relative_offsets",
    "positional_heads",
    "pretrained",
]
