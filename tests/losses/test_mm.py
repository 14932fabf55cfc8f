import numpy as np
import pytest
import torch

from oodbench.losses import create
from tests.losses.conftest import run


@pytest.mark.parametrize(("margin", "p"), [(1.0, 1), (0.5, 2)])
def test_equals_the_hinge_sum_over_all_outputs(batch, margin, p):
    logits, labels = batch
    n, c = logits.shape
    target = logits[np.arange(n), labels][:, None]
    hinge = np.maximum(0.0, margin - target + logits) ** p
    hinge[np.arange(n), labels] = 0.0
    expected = (hinge.sum(axis=1) / c).mean()
    value, _ = run(create("mm", margin=margin, p=p), logits, labels)
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_hand_computed_case():
    # torch's documented example: 0.25 * ((1 - 0.7) + (1 - 0.6) + (1 - 0.4)) = 0.325
    value, _ = run(create("mm"), np.array([[0.1, 0.2, 0.4, 0.8]]), np.array([3]))
    np.testing.assert_allclose(value, 0.325, rtol=1e-12)


def test_float32_extreme_logits_stay_finite(batch):
    run(create("mm"), *batch, dtype=torch.float32)
