"""A tiny pre-norm transformer encoder built from ``mha.MultiHeadAttention``, with head gates."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    require_features,
    require_flag,
    require_int,
    require_int_tensor,
    require_optional_int,
    require_token_ids,
)
from mha.analysis.pruning import prune_heads
from mha.layers.multi_head import MultiHeadAttention


class EncoderBlock(nn.Module):
    r"""One pre-norm block: ``x + MHA(LN(x))``, then ``x + MLP(LN(x))``.

    Pre-norm (layer norm before each sublayer, the residual stream left untouched) trains
    stably without a learning-rate warm-up, which keeps the toy runs short.

    Raises ``ValueError`` naming a bad ``embed_dim``, ``num_heads`` or ``mlp_dim``;
    :class:`mha.MemoryBudgetError` when the weights would exceed the memory budget.
    """

    def __init__(self, embed_dim: int, num_heads: int, mlp_dim: int) -> None:
        super().__init__()
        mlp_dim = require_int("mlp_dim", mlp_dim)
        embed_dim = require_int("embed_dim", embed_dim)
        check_allocation("EncoderBlock's MLP", (embed_dim, mlp_dim), torch.get_default_dtype(),
                         f"use a smaller embed_dim ({embed_dim}) or mlp_dim ({mlp_dim})")
        self.norm1 = nn.LayerNorm(embed_dim)
        self.attn = MultiHeadAttention(embed_dim, num_heads)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, mlp_dim), nn.GELU(),
                                 nn.Linear(mlp_dim, embed_dim))

    def forward(
        self, x: torch.Tensor, head_mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x``: ``(B, n, d)``; ``head_mask``: ``(h,)`` or ``(B, h)``. Returns ``(x, weights)``.
        NaN and inf in ``x`` reach the outputs (the rule of :func:`mha.attention`).

        ``x`` floating, in the module's dtype; ``head_mask`` float or bool; ``weights`` ``(B, h,
        n, n)`` or None. Raises ``ValueError`` naming ``x``, ``head_mask`` or ``need_weights``
        for a wrong type, shape, dtype or device; :class:`mha.MemoryBudgetError` when the
        activations would exceed the memory budget."""
        require_features("x", x, self.attn.embed_dim, self)
        check_output_allocation("EncoderBlock's activations", "x", x,
                                (*x.shape[:-1], max(x.shape[-1], self.mlp[0].out_features)),
                                x.dtype, "use fewer or shorter sequences")
        attended, weights = self.attn(self.norm1(x), head_mask=head_mask,
                                      need_weights=need_weights)
        x = x + attended
        return x + self.mlp(self.norm2(x)), weights


class TinyEncoder(nn.Module):
    r"""Token and learned position embeddings, ``num_layers`` pre-norm blocks, a linear read-out.

    ``logits = W_out LN(block_L(... block_1(E[tokens] + P[:n])))``, one prediction per token.

    Args:
        vocab_size: number of input symbols.
        num_classes: number of output classes per token.
        max_len: the longest sequence (the number of learned position vectors).
        embed_dim: width d of the residual stream.
        num_heads: heads per layer (each of size ``embed_dim // num_heads``).
        num_layers: number of blocks.
        mlp_dim: hidden width of the MLPs (default ``2 * embed_dim``).

    Raises ``ValueError`` naming a bad size; :class:`mha.MemoryBudgetError` when the weights
    would exceed the memory budget.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_len: int,
        *,
        embed_dim: int = 64,
        num_heads: int = 8,
        num_layers: int = 2,
        mlp_dim: int | None = None,
    ) -> None:
        super().__init__()
        vocab_size, num_classes = require_int("vocab_size", vocab_size), require_int(
            "num_classes", num_classes)
        max_len, num_layers = require_int("max_len", max_len), require_int("num_layers", num_layers)
        embed_dim, mlp_dim = require_int("embed_dim", embed_dim), require_optional_int(
            "mlp_dim", mlp_dim)
        for what, name, rows in [("token embedding", "vocab_size", vocab_size),
                                 ("position table", "max_len", max_len),
                                 ("read-out", "num_classes", num_classes)]:
            check_allocation(f"TinyEncoder's {what}", (rows, embed_dim),
                             torch.get_default_dtype(),
                             f"use a smaller {name} ({rows}) or embed_dim ({embed_dim})")
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, embed_dim)
        self.position_embedding = nn.Parameter(torch.randn(max_len, embed_dim))
        self.blocks = nn.ModuleList(
            EncoderBlock(embed_dim, num_heads, mlp_dim or 2 * embed_dim)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, num_classes)

    @property
    def heads_per_layer(self) -> list[int]:
        """The number of heads of each layer (they differ after structural pruning).

        A list of ints. Raises nothing."""
        return [block.attn.num_heads for block in self.blocks]

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        head_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        r"""Per-token class scores.

        ``tokens``: integer ``(B, n)`` with ``n <= max_len``. ``head_mask``: gates ``xi`` of
        shape ``(layers, heads)`` (one per head, shared by the batch) or ``(B, layers, heads)``;
        layer ``l``'s heads are multiplied by ``head_mask[..., l, :]`` (Michel et al. 2019).
        Returns ``(logits (B, n, num_classes), weights)`` where ``weights`` is a list with one
        ``(B, h_l, n, n)`` tensor per layer when ``need_weights`` is True, else None.

        ``tokens`` int64 or int32; ``head_mask`` float or bool; the logits and weights are
        floating, in the module's dtype. Raises ``ValueError`` naming ``tokens`` (not integer
        ids in the vocabulary, or longer than ``max_len``), ``head_mask`` or ``need_weights``;
        :class:`mha.MemoryBudgetError` when the activations would exceed the memory budget.
        """
        require_int_tensor("tokens", tokens)
        if tokens.dim() != 2 or not 1 <= tokens.shape[1] <= self.max_len:
            raise ValueError(f"tokens must have shape (batch, n) with 1 <= n <= {self.max_len}, "
                             f"got {tuple(tokens.shape)}")
        # the widest activation: the MLPs' hidden layers, the residual stream or the read-out
        width = max(self.readout.in_features, self.readout.out_features,
                    *(block.mlp[0].out_features for block in self.blocks))
        check_output_allocation("TinyEncoder's activations", "tokens", tokens,
                                (tokens.shape[0], tokens.shape[1], width),
                                self.readout.weight.dtype, "use smaller batches")
        require_token_ids("tokens", tokens, self.token_embedding.num_embeddings)
        need_weights = require_flag("need_weights", need_weights)
        gates = self._split_head_mask(head_mask, tokens.shape[0])
        x = self.token_embedding(tokens) + self.position_embedding[: tokens.shape[1]]
        all_weights = []
        for block, gate in zip(self.blocks, gates, strict=True):
            x, weights = block(x, head_mask=gate, need_weights=need_weights)
            all_weights.append(weights)
        return self.readout(self.norm(x)), (all_weights if need_weights else None)

    def _split_head_mask(self, head_mask: torch.Tensor | None, batch: int) -> list:
        layers = len(self.blocks)
        if head_mask is None:
            return [None] * layers
        heads = self.heads_per_layer
        if len(set(heads)) != 1:
            raise ValueError(f"head_mask needs the same number of heads in every layer, "
                             f"this encoder has {heads}")
        shapes = [(layers, heads[0]), (batch, layers, heads[0])]
        if not isinstance(head_mask, torch.Tensor) or tuple(head_mask.shape) not in shapes:
            raise ValueError(f"head_mask must have shape {shapes[0]} or {shapes[1]}, got "
                             f"{tuple(getattr(head_mask, 'shape', ()))}")
        return list(head_mask.unbind(dim=-2))

    def pruned(self, keep: torch.Tensor | Sequence[torch.Tensor]) -> TinyEncoder:
        """A copy whose layer ``l`` keeps only the heads ``h`` with ``keep[l, h]`` True.

        Uses ``mha.prune_heads`` layer by layer, so the copy computes what this encoder
        computes with ``head_mask=keep.float()``, with fewer parameters. Each layer must keep
        at least one head. ``keep`` is a bool ``(layers, heads)`` tensor, or a list of one bool
        row per layer: an encoder pruned to unequal heads per layer (``heads_per_layer``) takes
        only the list, as its rows have different lengths.

        Raises ``ValueError`` naming ``keep`` when it is neither, when a row's length is not
        its layer's number of heads, or when it leaves a layer without heads.
        """
        heads = self.heads_per_layer
        rows = list(keep) if isinstance(keep, list | tuple) else None
        if rows is not None:
            if len(rows) != len(heads) or not all(
                    isinstance(row, torch.Tensor) and row.dtype == torch.bool and row.dim() == 1
                    for row in rows):
                raise ValueError(f"keep as a list must hold one 1-D bool tensor per layer "
                                 f"({len(heads)} layers, heads per layer {heads}), got "
                                 f"{[getattr(r, 'shape', type(r).__name__) for r in rows]}")
        elif (not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool
                or keep.dim() != 2 or keep.shape[0] != len(heads)):
            raise ValueError(f"keep must be a bool tensor of shape (layers, heads) = "
                             f"({len(heads)}, heads), got {getattr(keep, 'dtype', None)} of shape "
                             f"{tuple(getattr(keep, 'shape', ()))}")
        else:
            rows = list(keep)
        smaller = copy.deepcopy(self)
        for layer, (block, row) in enumerate(zip(smaller.blocks, rows, strict=True)):
            if row.numel() != heads[layer]:
                hint = ("; its layers have unequal heads, so pass keep as a list of one bool "
                        "row per layer" if len(set(heads)) > 1 else "")
                raise ValueError(f"keep's row {layer} has {row.numel()} entries but layer "
                                 f"{layer} has {heads[layer]} heads (heads per layer "
                                 f"{heads}){hint}")
            if not row.any():
                raise ValueError(f"layer {layer} must keep at least one head, got keep row "
                                 f"{row.tolist()}")
            removed: Sequence[int] = (~row).nonzero().flatten().tolist()
            block.attn = prune_heads(block.attn, removed)
        return smaller
