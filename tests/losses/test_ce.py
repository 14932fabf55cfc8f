import numpy as np
import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.losses import create
from tests.losses.conftest import log_softmax, run


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_equals_the_written_out_formula(batch, eps):
    logits, labels = batch
    n, c = logits.shape
    q = np.full((n, c), eps / c)
    q[np.arange(n), labels] += 1.0 - eps
    expected = -(q * log_softmax(logits)).sum(axis=1).mean()
    value, _ = run(create("ce", smoothing=eps), logits, labels)
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_float32_extreme_logits_stay_finite(batch):
    logits, labels = batch
    run(create("ce"), logits, labels, dtype=torch.float32)


def test_rejects_bad_smoothing():
    with pytest.raises(InvalidInputError, match="smoothing"):
        create("ce", smoothing=1.0)
