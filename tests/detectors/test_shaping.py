"""The shared shaping maths: exact chunked percentiles, chunked head energy, top-k helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench import compute
from oodbench.detectors import _shaping
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (2,), (400, 37), (60, 8, 3, 3)])
def test_percentile_equals_numpy(dtype, shape):
    rng = np.random.default_rng(0)
    x = np.maximum(rng.normal(size=shape), 0).astype(dtype)  # many exact zeros (ties)
    for q in [0, 1, 33.3, 50, 90, 99.9, 100]:
        expected = np.percentile(x.astype(np.float64), q)
        # the same order statistics, interpolated in float64: a few ulps apart at most
        assert _shaping.percentile(x, q) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("path", ["every entry sampled", "bracketed pass", "histogram"])
def test_percentile_selection_paths_and_ties(monkeypatch, path):
    """Each way to the order statistics, on tied, rounded and heavy-tailed values, in many
    chunks: the sample holds every entry; a sample of rows brackets one exact pass; the bracket
    is refused (too many entries) and the histogram selection refines several times."""
    monkeypatch.setattr(_shaping, "CHUNK_BYTES", 4096)  # many row chunks
    if path != "every entry sampled":
        monkeypatch.setattr(_shaping, "_SAMPLE", 64)
    if path != "histogram":  # the histogram must not be needed

        def unused(*args):
            raise AssertionError("fell back to the histogram selection")

        monkeypatch.setattr(_shaping, "_kth_smallest", unused)
    if path == "histogram":
        monkeypatch.setattr(_shaping, "_BRACKET_LIMIT", -1)
        monkeypatch.setattr(_shaping, "_DIRECT", 7)
    rng = np.random.default_rng(1)
    for x in (np.round(rng.normal(size=(3000, 7)), 1), rng.exponential(size=(500, 40)) ** 4,
              np.maximum(rng.normal(size=(800, 16)), 0).astype(np.float32)):  # half zeros
        for q in np.linspace(0, 100, 23):
            # order statistics and NumPy's interpolation formula (elementwise IEEE operations,
            # no sums): the same bits on any CPU
            assert _shaping.percentile(x, q) == np.percentile(x.astype(np.float64), q)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_row_percentiles_equal_numpy(backend):
    rng = np.random.default_rng(4)
    x = np.round(rng.normal(size=(5, 301)), 1)  # ties
    with compute.use(backend, "cpu"):
        for q in (0.0, 10.0, 33.3, 50.0, 90.0, 100.0):
            got = _shaping.row_percentiles(torch.as_tensor(x), q).numpy()
            np.testing.assert_array_equal(got, np.percentile(x, q, axis=1))  # as above: exact


def test_percentile_per_unit_and_validation(monkeypatch):
    monkeypatch.setattr(_shaping, "CHUNK_BYTES", 8 * 50 * 3)  # three columns per chunk (CPU loop)
    x = np.random.default_rng(2).gamma(2.0, size=(50, 11)).astype(np.float32)
    np.testing.assert_allclose(
        _shaping.percentile_per_unit(x, 37.5), np.percentile(x.astype(np.float64), 37.5, axis=0)
    )
    with pytest.raises(InvalidInputError, match="empty"):
        _shaping.percentile(np.zeros((0, 3)), 50)
    with pytest.raises(InvalidInputError, match=r"\[0, 100\]"):
        _shaping.percentile(x, 101)


@compute.chunked(4 * 16 * 5)  # five rows per chunk
def test_head_energy_in_chunks():
    rng = np.random.default_rng(3)
    f = rng.random((23, 16))
    w, b = rng.normal(size=(9, 16)), rng.normal(size=9)
    got = _shaping.head_energy(f, torch.as_tensor(w), torch.as_tensor(b), lambda t: t * 2)
    # float64 features: a float64 head product; float32 ones: a float32 one (and float32 exps)
    assert_within(got, *head_energy_reference(2 * f, w, b, dtype=np.float64))
    f32 = f.astype(np.float32)
    got = _shaping.head_energy(f32, torch.as_tensor(w), torch.as_tensor(b), lambda t: t * 2)
    assert_within(got, *head_energy_reference(2 * f32.astype(np.float64), w, b))


def test_keep_count_and_sharpening():
    assert _shaping.keep_count(2048, 90) == 2048 - 1843
    assert _shaping.keep_count(10, 99.9) == 1  # never prunes everything
    features = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    kept = torch.tensor([[3.0], [0.0]])
    factor = _shaping.sharpening(features, kept)
    assert factor.dtype == torch.float64
    np.testing.assert_allclose(factor.numpy(), [np.exp(2.0), np.e])  # float64 exps: an ulp or two
