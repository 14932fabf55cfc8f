"""Random logits for the loss tests: ordinary ones and extreme ones (|z| up to 1e4).

The losses run in float64 against NumPy restatements: torch's vector exps and logs (an ulp
apart from NumPy's, or from another CPU's kernels) and its sums (in another order) put a loss,
a mean of terms no larger than ~|z|, within ~1e-15 relative of the restatement wherever the loss
is not near 0 (the extreme batch's mean is ~1e3, its largest terms 2e4: ~1e-15 too), so 1e-12
relative leaves a factor 1000; losses that are exactly 0 get an absolute tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch


def make_batch(n: int = 64, c: int = 7, scale: float = 3.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=scale, size=(n, c))
    labels = rng.integers(0, c, size=n)
    return logits, labels


@pytest.fixture(params=[("normal", 3.0), ("extreme", 1e4)], ids=lambda p: p[0])
def batch(request):
    """(logits float64 numpy, labels numpy); the extreme case has logits of order 1e4."""
    logits, labels = make_batch(scale=request.param[1])
    if request.param[0] == "extreme":
        logits[0] = 0.0  # an all-zero row (LogitNorm's norm is 0 there)
        logits[1, :] = 1e4  # all tied at 1e4
        logits[2, labels[2]] = -1e4  # the label far below the rest
    return logits, labels


def run(loss, logits, labels, outliers=None, dtype=torch.float64):
    """The loss value and the gradient w.r.t. the logits, both as numpy."""
    z = torch.tensor(logits, dtype=dtype, requires_grad=True)
    out = None if outliers is None else torch.tensor(outliers, dtype=dtype, requires_grad=True)
    value = loss(z, torch.as_tensor(labels), out)
    value.backward()
    assert torch.isfinite(value), f"{loss.name}: non-finite loss {value}"
    assert torch.isfinite(z.grad).all(), f"{loss.name}: non-finite gradient"
    return float(value.detach()), z.grad.numpy()


def log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
