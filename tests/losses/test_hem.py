"""HEM against the definition written out per sample with plain Python loops."""

import numpy as np
import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.losses import create
from tests.losses.conftest import run


def hem_reference(logits: np.ndarray, labels: np.ndarray, margin: float) -> float:
    per_sample = []
    for z, y in zip(logits, labels):
        errors = [max(0.0, margin - (z[y] - z[j])) if j != y else 0.0 for j in range(len(z))]
        mean = sum(errors) / len(errors)
        high = [e for e in errors if e >= mean and e > 0]
        per_sample.append(sum(high) / len(high) if high else 0.0)
    active = [v for v in per_sample if v > 0]
    return sum(active) / len(active) if active else 0.0


@pytest.mark.parametrize("margin", [1.0, 0.25])
def test_equals_the_reference_definition(batch, margin):
    logits, labels = batch
    value, _ = run(create("hem", margin=margin), logits, labels)
    np.testing.assert_allclose(value, hem_reference(logits, labels, margin), rtol=1e-12)


def test_hand_computed_case():
    # errors for the label 0: class 1 -> 1 - (2 - 2.5) = 1.5, class 2 -> 1 - (2 - 0) = 0 (none),
    # class 3 -> 1 - (2 - 1.5) = 0.5; mean over 4 outputs 0.5 -> {1.5, 0.5} kept -> 1.0.
    # second sample separated by more than the margin: no error, left out of the batch mean.
    z = np.array([[2.0, 2.5, 0.0, 1.5], [5.0, 0.0, 1.0, 3.0]])
    value, grad = run(create("hem"), z, np.array([0, 0]))
    np.testing.assert_allclose(value, 1.0, rtol=1e-12)
    np.testing.assert_allclose(grad[1], 0.0)  # a separated sample gets no gradient
    np.testing.assert_allclose(grad[0], [-1.0, 0.5, 0.0, 0.5])


def test_all_separated_batch_is_zero_with_zero_gradient():
    value, grad = run(create("hem"), np.array([[9.0, 0.0, 1.0]]), np.array([0]))
    assert value == 0.0 and not grad.any()


def test_float32_extreme_logits_stay_finite(batch):
    run(create("hem"), *batch, dtype=torch.float32)


def test_rejects_bad_margin():
    with pytest.raises(InvalidInputError, match="margin"):
        create("hem", margin=-1)
