import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

from oodbench import compute
from oodbench.detectors import _stats, create
from oodbench.detectors._neighbours import NeighbourIndex, normalized_float32
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within, scatter_error


@compute.chunked(7 * 6 * 8)  # force several chunks of 7 rows
def test_class_means_and_scatter_match_numpy_across_chunks():
    rng = np.random.default_rng(0)
    f = rng.normal(size=(50, 6)).astype(np.float32)
    y = rng.integers(0, 4, size=50)
    y[y == 2] = 1  # class 2 has no samples
    means, counts = _stats.class_means(f, y, 5)
    np.testing.assert_array_equal(counts.numpy(), np.bincount(y, minlength=5))
    for c in (0, 1, 3):  # float64 means of <= 25 values of size ~1, all >= 0.04: ~1e-14 relative
        np.testing.assert_allclose(means[c].numpy(), f[y == c].astype(np.float64).mean(axis=0), rtol=1e-12)
    assert not means[2].any()
    # scatter entries may be small sums of 50 products: bounded by the sums' rounding instead
    centred = f.astype(np.float64) - means.numpy()[y]
    assert_within(_stats.scatter_matrix(f, means, y).numpy(), centred.T @ centred, scatter_error(centred))
    mu = _stats.feature_mean(f)
    np.testing.assert_allclose(mu.numpy(), f.astype(np.float64).mean(axis=0), rtol=1e-12)  # as above
    c0 = f.astype(np.float64) - mu.numpy()
    assert_within(_stats.scatter_matrix(f, mu).numpy(), c0.T @ c0, scatter_error(c0))


@pytest.mark.parametrize("rank", [6, 3])
def test_whitener_is_a_square_root_of_pinvh(rank):
    rng = np.random.default_rng(rank)
    a = rng.normal(size=(6, rank))
    cov = a @ a.T
    w = _stats.whitener(torch.as_tensor(cov)).numpy()
    assert w.shape == (6, rank)
    expected = scipy.linalg.pinvh(cov)
    # kept eigenvalues 0.19 to 21 (condition number ~100): float64 rounding ~1e-13 relative;
    # rank 3's three zero eigenvalues (~1e-15) are cut by both
    np.testing.assert_allclose(w @ w.T, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())


def test_min_sq_mahalanobis_brute_force():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 5))
    centres = rng.normal(size=(3, 5))
    a = rng.normal(size=(5, 5))
    precision = a @ a.T
    w = np.linalg.cholesky(precision)  # w w^T = precision
    got = _stats.min_sq_mahalanobis(x, torch.as_tensor(centres), torch.as_tensor(w)).numpy()
    d = np.stack([np.einsum("nd,de,ne->n", x - m, precision, x - m) for m in centres], axis=1)
    # the three-term form ||z||^2 - 2 z.m + ||m||^2 (terms <= 36) loses ~1e-14 absolute; the
    # smallest distance is 1.19, so 1e-10 relative leaves a factor 1e4
    np.testing.assert_allclose(got, d.min(axis=1), rtol=1e-10)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_neighbour_search_is_exact(backend):
    """faiss (numpy path) and tiled matmul + topk (torch path, tiles of 8 x 8 entries here)."""
    rng = np.random.default_rng(2)
    bank = rng.normal(size=(40, 5))
    queries = rng.normal(size=(17, 5)) * 3
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    b, q = unit(bank), unit(queries)
    with compute.use(backend, "cpu", chunk_bytes=4 * 64):
        l2 = NeighbourIndex(normalized_float32(bank), "l2").search(queries, 4)
        ip = NeighbourIndex(normalized_float32(bank), "ip").search(queries, 4)
    expected = np.sort(((q[:, None] - b[None]) ** 2).sum(axis=2), axis=1)[:, :4]
    # float32 unit vectors (5-d): distances and products within ~1e-7 of the float64 ones
    np.testing.assert_allclose(l2, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ip, -np.sort(-(q @ b.T), axis=1)[:, :4], rtol=1e-5, atol=1e-6)


def test_normalized_float32_is_within_one_ulp_of_the_float64_quotient():
    """Rows divided in float32 by their float64 norm: at most one float32 ulp from the correctly
    rounded f / ||f||; zero rows stay zero; float16 rows are widened first."""
    rng = np.random.default_rng(5)
    features = np.abs(rng.normal(size=(300, 2048))).astype(np.float32) * 7.0
    features[3] = 0.0
    for rows in (features, features.astype(np.float16)):
        exact = rows.astype(np.float64)
        norms = np.linalg.norm(exact, axis=1, keepdims=True)
        expected = (exact / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        got = normalized_float32(rows)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        ulps = np.abs(got.view(np.int32).astype(np.int64) - expected.view(np.int32))
        assert ulps.max() <= 1
        assert not got[3].any()


def test_subsample():
    np.testing.assert_array_equal(_stats.subsample(10, 1.0, 0, "t"), np.arange(10))
    rows = _stats.subsample(1000, 0.1, 3, "t")
    assert len(rows) == 100 and len(set(rows)) == 100 and np.all(np.diff(rows) > 0)
    np.testing.assert_array_equal(rows, _stats.subsample(1000, 0.1, 3, "t"))
    assert not np.array_equal(rows, _stats.subsample(1000, 0.1, 4, "t"))
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(InvalidInputError, match="fit_fraction"):
            _stats.subsample(10, bad, 0, "t")


def _read_only(acts):
    out = acts.subset(np.arange(len(acts)))
    for name in ("logits", "labels", "features", "head_weight", "head_bias"):
        arr = np.array(getattr(out, name))
        arr.flags.writeable = False  # like memory-mapped activations from the cache
        setattr(out, name, arr)
    return out


@pytest.mark.parametrize(
    "name",
    ["maxlogit", "entropy", "energy", "gen", "klm", "temperature_scaling", "maxcosine", "maxnorm",
     "dml", "mahalanobis", "rmd", "knn", "vim", "she", "nnguide", "fdbd", "nci"],
)
def test_read_only_arrays_score_like_writable_ones(name, id_train, id_test):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "non-writable array" warning
        warnings.simplefilter("ignore", _stats.LargeKWarning)  # k=50 of a small bank: intended
        fit = _read_only(id_train)
        ours = create(name).fit(fit, id_val=fit).score(_read_only(id_test))
    # the same values through the same code in this process (read-only arrays are copied): the
    # same bits on any CPU
    np.testing.assert_array_equal(ours, create(name).fit(id_train, id_val=id_train).score(id_test))
