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
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_float32_extreme_logits_stay_finite(batch):
    run(create("logitnorm"), *batch, dtype=torch.float32)


def test_default_tau_is_the_papers():
    assert create("logitnorm").tau == 0.04
    with pytest.raises(InvalidInputError, match="tau"):
        create("logitnorm", tau=0)
