"""Checks for the exercises of chapter 7 (head roles and pruning)."""

from __future__ import annotations

import torch

from mha.exercises import Wrong, exercise_check, expect_close, seed
from mha.hard_concrete import hard_concrete_sample


@exercise_check("7.1")
def prob_gate_one(answer) -> None:
    """``answer(log_alpha, temperature, low, high)`` -> P(z = 1), checked by Monte Carlo."""
    generator = torch.Generator().manual_seed(seed(71))
    u = torch.rand(400_000, generator=generator, dtype=torch.float64)
    u = u.clamp(1e-12, 1 - 1e-12)
    for log_alpha, beta, low, high in [(0.0, 0.33, -0.1, 1.1), (2.0, 0.5, -0.1, 1.1),
                                       (-1.0, 0.8, -0.3, 1.2), (1.5, 0.2, -0.05, 1.05)]:
        la = torch.tensor(log_alpha, dtype=torch.float64)
        estimate = (hard_concrete_sample(la, u, beta, (low, high)) == 1).double().mean()
        got = answer(la, beta, low, high)
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"expected a torch.Tensor, got {type(got).__name__}")
        # a Monte-Carlo estimate from 400 000 draws is within 0.004 of the truth
        if got.shape != () or abs(got.item() - estimate.item()) > 0.004:
            raise Wrong(f"for log_alpha={log_alpha}, temperature={beta}, stretch=({low}, "
                        f"{high}) a simulation gives P(z = 1) = {estimate.item():.4f}, your "
                        f"function returned {got.detach().reshape(-1)[:1].tolist()}")


@exercise_check("7.4")
def one_head_per_layer(answer) -> None:
    """``answer(importance)`` -> bool keep mask with the single most important head per layer."""
    gen = torch.Generator().manual_seed(seed(74))
    for shape in [(2, 8), (3, 4), (1, 5)]:
        importance = torch.rand(shape, generator=gen)
        expected = torch.zeros(shape, dtype=torch.bool)
        for layer in range(shape[0]):
            expected[layer, int(importance[layer].argmax())] = True
        got = answer(importance)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
            raise Wrong(f"expected a bool tensor, got {getattr(got, 'dtype', type(got))}")
        if got.shape != expected.shape:
            raise Wrong(f"for importance of shape {shape} expected a mask of the same shape, "
                        f"got {tuple(got.shape)}")
        if not torch.equal(got, expected):
            raise Wrong(f"for importance {importance.round(decimals=2).tolist()} the mask "
                        f"{got.int().tolist()} does not keep exactly the top head of each layer")


@exercise_check("7.5")
def confidence_order(answer) -> None:
    """``answer(confidence)`` with ``(layers, heads)`` scores -> heads, least confident first."""
    confidence = torch.tensor([[0.9, 0.2, 0.5], [0.3, 0.95, 0.1]])
    got = answer(confidence)
    flat = [(layer, h) for layer in range(2) for h in range(3)]
    expected = sorted(flat, key=lambda lh: confidence[lh].item())
    if not isinstance(got, list | tuple) or [tuple(x) for x in got] != expected:
        raise Wrong(f"for confidence {confidence.tolist()} expected all six (layer, head) "
                    f"pairs from the least to the most confident, got {got}")
    expect_close("confidence is unchanged", confidence,
                 torch.tensor([[0.9, 0.2, 0.5], [0.3, 0.95, 0.1]]))
