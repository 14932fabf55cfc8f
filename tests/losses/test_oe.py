import numpy as np
import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.losses import create
from tests.losses.conftest import log_softmax, make_batch, run


def test_equals_ce_plus_half_the_uniform_cross_entropy(batch):
    logits, labels = batch
    outliers = make_batch(n=32, c=logits.shape[1], scale=float(np.abs(logits).max()), seed=5)[0]
    ce = -log_softmax(logits)[np.arange(len(labels)), labels].mean()
    to_uniform = -(log_softmax(outliers).mean(axis=1)).mean()
    value, _ = run(create("oe"), logits, labels, outliers)
    np.testing.assert_allclose(value, ce + 0.5 * to_uniform, rtol=1e-12)


def test_uniform_outliers_cost_log_c():
    value, _ = run(create("oe", weight=1.0), np.array([[50.0, 0.0, 0.0]]), np.array([0]),
                   np.zeros((4, 3)))
    np.testing.assert_allclose(value, np.log(3.0), rtol=1e-9)  # CE of the ID row ~ 0


def test_needs_an_outlier_batch():
    with pytest.raises(InvalidInputError, match="outlier"):
        create("oe")(torch.zeros(2, 3), torch.tensor([0, 1]))


def test_float32_extreme_logits_stay_finite(batch):
    logits, labels = batch
    run(create("oe"), logits, labels, logits[::-1].copy(), dtype=torch.float32)
