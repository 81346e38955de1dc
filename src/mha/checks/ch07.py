"""Checks for the exercises of chapter 7 (head roles and pruning)."""

from __future__ import annotations

import torch

from mha.analysis.hard_concrete import hard_concrete_sample
from mha.exercises import Wrong, call_seeing_inputs, exercise_check, finite_number, seed, within


@exercise_check("7.1", reference_names=("mha.hard_concrete_sample",
                                         "mha.hard_concrete.hard_concrete_sample"))
def prob_gate_one(answer) -> None:
    """``answer(log_alpha, temperature, low, high)`` -> P(z = 1), checked by Monte Carlo."""
    generator = torch.Generator().manual_seed(seed(71))
    u = torch.rand(400_000, generator=generator, dtype=torch.float64)
    u = u.clamp(1e-12, 1 - 1e-12)
    # the paper's stretch (-0.1, 1.1) and temperature 1/3 first, then hidden-seed settings
    cases = [(round(torch.empty(()).uniform_(-2, 2, generator=generator).item(), 2), 0.33,
              -0.1, 1.1)]
    for _ in range(3):
        log_alpha, beta, low, high = (torch.rand(4, generator=generator) * torch.tensor(
            [4.0, 0.7, 0.3, 0.3]) + torch.tensor([-2.0, 0.2, -0.35, 1.02])).tolist()
        cases.append((round(log_alpha, 2), round(beta, 2), round(low, 2), round(high, 2)))
    for log_alpha, beta, low, high in cases:
        la = torch.tensor(log_alpha, dtype=torch.float64)
        estimate = (hard_concrete_sample(la, u, beta, (low, high)) == 1).double().mean()
        got = answer(la, beta, low, high)
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"expected a torch.Tensor, got {type(got).__name__}")
        # tolerance: 0.004, the check's own estimate being a Monte-Carlo one: from 400 000
        # draws its standard deviation is at most 0.0008, so 0.004 is 5 of them; any exact
        # formula (sigmoid, 1 / (1 + exp), float32) is well within it
        if got.shape != ():
            raise Wrong(f"expected one number (a tensor of shape ()), got shape "
                        f"{tuple(got.shape)}")
        what = f"for log_alpha={log_alpha}, temperature={beta}, stretch=({low}, {high})"
        value = finite_number(f"{what} your P(z = 1)", got)  # NaN is never within 0.004
        if not within(value, estimate.item(), 0.004):
            side = "larger" if value > estimate.item() else "smaller"
            raise Wrong(f"{what} your P(z = 1) = {value:.4f} is {side} than a "
                        f"simulation of the gate gives (z = 1 where the stretched sample "
                        f"reaches 1 or more)")


def _check_keep_masks(answer, cases) -> None:
    """Exact comparison: the mask is bools; ties are exact (values in quarters)."""
    for what, importance in cases:
        shape = tuple(importance.shape)
        expected = torch.zeros(shape, dtype=torch.bool)
        for layer, row in enumerate(importance.tolist()):
            # the highest score; on a tie the lowest index (as argmax does)
            expected[layer, min(j for j, v in enumerate(row) if v == max(row))] = True
        got = answer(importance)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
            raise Wrong(f"expected a bool tensor, got {getattr(got, 'dtype', type(got))}")
        if got.shape != expected.shape:
            raise Wrong(f"for importance of shape {shape} expected a mask of the same shape, "
                        f"got {tuple(got.shape)}")
        if not torch.equal(got, expected):
            counts = got.sum(dim=1).tolist()
            if any(c != 1 for c in counts):
                raise Wrong(f"for {what} of shape {shape} your mask keeps {counts} heads "
                            f"in the layers: exactly one per layer, please")
            raise Wrong(f"for {what} of shape {shape} your mask keeps one head per layer, "
                        f"but not always the most important one (largest importance; on a "
                        f"tie the lowest index)")


@exercise_check("7.4", points=0.5, part="random importance scores",
                reference_names=("mha.checks.ch07",))  # no mha callable solves it
def one_head_per_layer(answer) -> None:
    """``answer(importance)`` -> bool keep mask with the single most important head per layer."""
    gen = torch.Generator().manual_seed(seed(74))
    _check_keep_masks(answer, [("importance", torch.rand(shape, generator=gen,
                                                         dtype=torch.float64))
                               for shape in [(2, 8), (3, 4), (1, 5)]])


@one_head_per_layer.part("tied scores, and one head per layer", points=0.5, hidden=True)
def _ties(answer) -> None:
    # the prompt's tie rule: two heads of a layer share the top score and the lower index is
    # kept (an answer comparing with the maximum keeps both; one sorting descending, the
    # last); and a (layers, 1) input, where the only head is kept
    gen = torch.Generator().manual_seed(seed(1074))
    tied = (torch.randint(0, 8, (3, 5), generator=gen) / 4).double()
    for layer in range(3):
        top = torch.randperm(5, generator=gen)[:2]
        tied[layer, top] = 2.5
    _check_keep_masks(answer, [("tied importance", tied),
                               ("importance", torch.rand(4, 1, generator=gen,
                                                         dtype=torch.float64))])


@exercise_check("7.5", reference_names=("mha.pruning_order",
                                         "mha.pruning_curves.pruning_order"))
def confidence_order(answer) -> None:
    """``answer(confidence)`` with ``(layers, heads)`` scores -> heads, least confident first."""
    gen = torch.Generator().manual_seed(seed(75))
    for layers, heads in [(2, 3), (3, 4)]:
        # two decimals: some ties, broken by the flat index as the exercise says
        confidence = (torch.rand(layers, heads, generator=gen, dtype=torch.float64) * 20).round()
        confidence = confidence / 20
        flat = [(layer, h) for layer in range(layers) for h in range(heads)]
        expected = sorted(flat, key=lambda lh: confidence[lh].item())  # stable: flat order
        # exact comparison: an order of pairs (numpy integers in them are numbers too)
        got, after = call_seeing_inputs(answer, confidence)
        what = f"for confidence of shape ({layers}, {heads})"
        if not isinstance(got, list | tuple) or not all(
                isinstance(x, list | tuple) and len(x) == 2 for x in got):
            raise Wrong(f"{what}: expected a list of (layer, head) pairs, got "
                        f"{type(got).__name__}")
        got = [tuple(x) for x in got]
        if sorted(got) != flat:
            raise Wrong(f"{what}: expected each of the {len(flat)} (layer, head) pairs once, "
                        f"got {len(got)} pairs")
        if got != expected:
            if got == expected[::-1]:
                raise Wrong(f"{what}: your order goes from the most to the least confident")
            raise Wrong(f"{what}: your order is not from the least to the most confident "
                        f"(ties in the order of the flat index layer * heads + head)")
        if after is not None and not torch.equal(after[0], confidence):
            raise Wrong(f"{what}: your function changed confidence in place; sort a copy")
