import numpy as np
import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.losses import create
from tests.losses.conftest import log_softmax, run


@pytest.mark.parametrize("tau", [0.04, 1.0])
def test_equals_ce_of_normalised_logits(batch, tau):
    logits, labels = batch
    scaled = logits / (tau * (np.linalg.norm(logits, axis=1, keepdims=True) + 1e-7))
    expected = -log_softmax(scaled)[np.arange(len(labels)), labels].mean()
    value, _ = run(create("logitnorm", tau=tau), logits, labels)
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_scale_invariant_away_from_zero():
    rng = np.random.default_rng(1)
    z, y = rng.normal(size=(8, 5)) * 3, rng.integers(0, 5, 8)
    a, _ = run(create("logitnorm"), z, y)
    b, _ = run(create("logitnorm"), z * 1000.0, y)
    # only LogitNorm's 1e-7 in the norm tells them apart: ~1e-7 relative at norms ~3
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_float32_extreme_logits_stay_finite(batch):
    run(create("logitnorm"), *batch, dtype=torch.float32)


def test_default_tau_is_the_papers():
    assert create("logitnorm").tau == 0.04
    with pytest.raises(InvalidInputError, match="tau"):
        create("logitnorm", tau=0)


def test_gradient_is_ce_gradient_scaled_by_one_over_tau_norm_and_projected():
    """d LN / d z_i = (1 / N) (1 / (tau ||z_i||)) (I - zhat zhat^T) (softmax(z_i / (tau ||z_i||))
    - onehot(y_i)): the closed form behind LogitNorm's large early steps (see its docstring)."""
    rng = np.random.default_rng(4)
    tau, n, c = 0.04, 6, 5
    z = torch.tensor(rng.normal(size=(n, c)) * 0.3, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(rng.integers(0, c, n))
    create("logitnorm", tau=tau)(z, y).backward()
    zn = z.detach().numpy()
    norms = np.linalg.norm(zn, axis=1, keepdims=True)  # the 1e-7 is far below these norms
    scaled = zn / (tau * norms)
    p = np.exp(scaled - scaled.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    residual = p - np.eye(c)[y.numpy()]
    zhat = zn / norms
    projected = residual - (residual * zhat).sum(axis=1, keepdims=True) * zhat
    expected = projected / (tau * norms) / n
    # the expected gradient leaves out the 1e-7 in the norm (~1e-7 / |z| relative, |z| ~ 0.7)
    np.testing.assert_allclose(z.grad.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert float(np.abs((z.grad.numpy() * zn).sum(axis=1)).max()) < 1e-6  # orthogonal to z
