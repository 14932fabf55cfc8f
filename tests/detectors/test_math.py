"""The selection helpers of ``detectors/_math.py`` on both compute paths, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench import compute
from oodbench.detectors._math import row_max, top_values
from tests._fake_device import fake_device


def _logits() -> np.ndarray:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(64, 30)).astype(np.float32)
    z[5, [3, 17]] = z[5].max() + 1.0  # a tie for the maximum
    z[9] = 0.0  # a row of equal values
    return z


@pytest.fixture(params=["numpy", "torch"])
def on_path(request):
    """Run the body on the NumPy path, or on the torch path on a stand-in GPU."""
    if request.param == "numpy":
        with compute.use("numpy"):
            yield torch.device("cpu")
    else:
        with fake_device() as device, compute.use("torch", device):
            yield device


def test_row_max_gives_each_rows_maximum_and_a_position_of_it(on_path):
    z = _logits()
    top, where = row_max(torch.from_numpy(z).to(on_path))
    top, where = top.cpu().numpy(), where.cpu().numpy()
    assert top.shape == where.shape == (64, 1)
    # selections of stored values, no arithmetic: exact on any CPU
    np.testing.assert_array_equal(top[:, 0], z.max(axis=1))
    np.testing.assert_array_equal(z[np.arange(64), where[:, 0]], z.max(axis=1))
    assert where[5, 0] in (3, 17)


@pytest.mark.parametrize("m", [1, 7, 30, 45])
def test_top_values_are_the_m_largest_of_each_row(on_path, m):
    z = _logits()
    values = top_values(torch.from_numpy(z).to(on_path), m).cpu().numpy()
    expected = np.sort(z, axis=1)[:, ::-1][:, : min(m, 30)]
    assert values.shape == expected.shape
    np.testing.assert_array_equal(np.sort(values, axis=1)[:, ::-1], expected)  # selections: exact
