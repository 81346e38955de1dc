"""Hard Concrete gates: the sampling formula, the closed form of P(gate != 0), the eval gates."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(7)  # make chapter runs this file (issue 38)


def gate_by_hand(log_alpha, u, beta, low, high):
    """The Hard Concrete gate of Louizos et al. (2018), written with the math module."""
    s = 1 / (1 + math.exp(-(math.log(u) - math.log(1 - u) + log_alpha) / beta))
    return min(1.0, max(0.0, low + (high - low) * s))


@settings(max_examples=50, deadline=None)
@given(log_alpha=st.floats(-6, 6), u=st.floats(1e-4, 1 - 1e-4), beta=st.floats(0.1, 1.0))
def test_sample_equals_the_formula(log_alpha, u, beta):
    got = mha.hard_concrete_sample(torch.tensor(log_alpha, dtype=torch.float64),
                                   torch.tensor(u, dtype=torch.float64), beta, (-0.1, 1.1))
    assert got.item() == pytest.approx(gate_by_hand(log_alpha, u, beta, -0.1, 1.1), abs=1e-12)


@settings(max_examples=10, deadline=None)
@given(log_alpha=st.floats(-4, 4), beta=st.floats(0.2, 1.0),
       low=st.floats(-0.5, -0.05), high=st.floats(1.05, 1.5))
def test_closed_form_prob_nonzero_matches_monte_carlo(log_alpha, beta, low, high):
    n = 200_000
    u = torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = u.clamp(1e-12, 1 - 1e-12)
    z = mha.hard_concrete_sample(torch.tensor(log_alpha, dtype=torch.float64), u, beta,
                                 (low, high))
    estimate = (z != 0).double().mean().item()
    closed = mha.prob_nonzero(torch.tensor(log_alpha, dtype=torch.float64), beta,
                              (low, high)).item()
    # five standard errors of a Bernoulli mean
    assert abs(estimate - closed) < 5 * math.sqrt(closed * (1 - closed) / n) + 1e-4


def test_gates_module_train_and_eval():
    gates = mha.HardConcreteGates((2, 3), init_log_alpha=0.5)
    with torch.no_grad():
        gates.log_alpha.copy_(torch.tensor([[-5.0, 0.0, 5.0], [1.0, -1.0, 20.0]]))
    gates.eval()
    expected = (-0.1 + 1.2 * torch.sigmoid(gates.log_alpha)).clamp(0, 1)
    torch.testing.assert_close(gates(), expected)
    assert gates()[0, 0].item() == 0.0 and gates()[1, 2].item() == 1.0
    gates.train()
    sample = gates(batch=5, generator=torch.Generator().manual_seed(0))
    assert sample.shape == (5, 2, 3) and ((sample >= 0) & (sample <= 1)).all()
    # the penalty is differentiable and equals the sum of the closed forms
    penalty = gates.l0_penalty()
    penalty.backward()
    torch.testing.assert_close(penalty, mha.prob_nonzero(gates.log_alpha.detach()).sum())
    p = gates.prob_nonzero().detach()
    torch.testing.assert_close(gates.log_alpha.grad, p * (1 - p))  # d sigmoid / dx


def test_gate_gradient_flows_where_not_clipped():
    log_alpha = torch.zeros(3, requires_grad=True)
    z = mha.hard_concrete_sample(log_alpha, torch.tensor([1e-5, 0.5, 1 - 1e-5]))
    z.sum().backward()
    assert z[0] == 0 and z[2] == 1 and 0 < z[1] < 1
    assert log_alpha.grad[0] == 0 and log_alpha.grad[2] == 0 and log_alpha.grad[1] > 0


def test_bad_parameters():
    with pytest.raises(ValueError, match="temperature must be positive, got 0"):
        mha.prob_nonzero(torch.zeros(1), temperature=0)
    with pytest.raises(ValueError, match=r"low < 0 and high > 1, got \(0.0, 1.1\)"):
        mha.HardConcreteGates((2,), stretch=(0.0, 1.1))
    with pytest.raises(ValueError, match="strictly inside"):
        mha.hard_concrete_sample(torch.zeros(2), torch.tensor([0.0, 0.5]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_training_gates_have_log_alphas_dtype_and_the_float32_values(dtype):
    """The sample is computed in float32 (1 - 1e-6 rounds to 1 in these dtypes) and returned in
    log_alpha's dtype, as the docstring says, so it fits a model of that dtype as head_mask."""
    gates = mha.HardConcreteGates((2, 3), init_log_alpha=0.5).to(dtype).train()
    reference = mha.HardConcreteGates((2, 3), init_log_alpha=0.5).train()
    sampled = gates(4, torch.Generator().manual_seed(0))
    assert sampled.dtype == dtype and sampled.shape == (4, 2, 3)
    expected = reference(4, torch.Generator().manual_seed(0)).detach().to(dtype)
    assert torch.equal(sampled.detach(), expected)
    layer = mha.MultiHeadAttention(6, 3).to(dtype)
    out, _ = layer(torch.randn(2, 5, 6, dtype=dtype), head_mask=gates(2)[:, 0])
    assert out.dtype == dtype


def test_training_gates_draw_their_noise_on_the_gates_device():
    """On the CPU the noise made gates elsewhere fail, naming a u the caller never passed."""
    gates = mha.HardConcreteGates((2, 3)).to("meta")
    sampled = gates(4)
    assert sampled.device.type == "meta" and sampled.shape == (4, 2, 3)
    with pytest.raises(ValueError, match=r"generator is on cpu .* meta"):
        gates(4, torch.Generator().manual_seed(0))


def test_training_gates_on_the_cpu_are_the_formula_of_the_generators_noise():
    """Drawn on log_alpha's device, the CPU's draws are what they were: the generator's."""
    gates = mha.HardConcreteGates((2, 3), init_log_alpha=0.5)
    got = gates(4, torch.Generator().manual_seed(3))
    u = torch.rand(4, 2, 3, generator=torch.Generator().manual_seed(3)).clamp(1e-6, 1 - 1e-6)
    reference = torch.tensor([gate_by_hand(0.5, float(v), 0.33, -0.1, 1.1)
                              for v in u.flatten()], dtype=torch.float64).reshape(4, 2, 3)
    torch.testing.assert_close(got.double(), reference, rtol=0, atol=1e-6)
