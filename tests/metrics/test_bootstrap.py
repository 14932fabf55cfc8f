"""Bootstrap intervals: the vectorised count maths equals the point metrics on each resample.

Why tolerances of 1e-12 and exact equalities hold on any CPU: the metrics rank the scores and
count (integers), then divide and sum in NumPy, whose elementwise operations are correctly
rounded and whose sums run in one fixed (pairwise) order; no BLAS, no threads, no vector
transcendental kernels. Two computations of one metric differ by float64 rounding of sums of at
most a few thousand terms in [0, 1] (< 1e-13), or not at all where both divide the same counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.errors import InvalidInputError
from oodbench.metrics import evaluate
from oodbench.metrics.bootstrap import bootstrap_ci, bootstrap_replicates, metric_functions
from oodbench.metrics.ood import rank_id_vs_ood

METRICS = ("auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out")


def test_batched_counts_equal_evaluate_on_each_resample() -> None:
    """A resample as re-weighted counts on the full sample's distinct scores (zeros included)
    gives exactly what ``evaluate`` gives on the resampled arrays themselves."""
    rng = np.random.default_rng(0)
    x, y = np.round(rng.normal(1, 1, 60), 1), np.round(rng.normal(0, 1, 45), 1)
    ranking = rank_id_vs_ood(x, y)
    ix, iy = np.searchsorted(ranking.values, x), np.searchsorted(ranking.values, y)
    draws_x = rng.integers(0, x.size, (40, x.size))
    draws_y = rng.integers(0, y.size, (40, y.size))
    m = ranking.values.size
    pos = np.array([np.bincount(ix[d], minlength=m) for d in draws_x])
    neg = np.array([np.bincount(iy[d], minlength=m) for d in draws_y])
    assert (pos == 0).any() and (neg == 0).any()  # some distinct scores missing in resamples
    functions = metric_functions(0.95)
    for name in METRICS:
        batch = functions[name](pos, neg)
        reference = [evaluate(x[dx], y[dy])[name] for dx, dy in zip(draws_x, draws_y)]
        np.testing.assert_allclose(batch, reference, rtol=0, atol=1e-12, err_msg=name)


def test_intervals_are_seeded_and_bracket_the_estimate() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(1, 1, 300), rng.normal(0, 1, 200)
    full = evaluate(x, y)
    a = bootstrap_ci(x, y, METRICS, n_boot=300, seed=7)
    assert a == bootstrap_ci(x, y, METRICS, n_boot=300, seed=7)
    assert a != bootstrap_ci(x, y, METRICS, n_boot=300, seed=8)
    for name, iv in a.items():
        assert iv.estimate == pytest.approx(full[name], abs=1e-12)
        assert iv.low <= iv.estimate <= iv.high
    reps = bootstrap_replicates(x, y, ["fpr95_id"], n_boot=300, seed=7)["fpr95_id"]
    assert reps.shape == (300,)
    assert a["fpr95_id"].low == pytest.approx(np.quantile(reps, 0.025))
    small = bootstrap_ci(x[:60], y[:40], ["aupr_in"], n_boot=300, seed=7)["aupr_in"]
    assert small.high - small.low > a["aupr_in"].high - a["aupr_in"].low  # fewer samples, wider


def test_chunks_cover_every_replicate(monkeypatch: pytest.MonkeyPatch) -> None:
    import oodbench.metrics.bootstrap as bootstrap

    monkeypatch.setattr(bootstrap, "_CELLS", 100)  # one replicate per chunk
    reps = bootstrap_replicates(np.arange(50.0), np.arange(30.0) - 10, ["auroc"], n_boot=7)
    assert reps["auroc"].shape == (7,) and np.isfinite(reps["auroc"]).all()


def test_evaluate_adds_interval_keys() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(1, 1, 100), rng.normal(0, 1, 80)
    plain = evaluate(x, y)
    assert not any("_ci_" in k for k in plain)
    with_ci = evaluate(x, y, ci=True)
    assert set(with_ci) - set(plain) == {"auroc_ci_low", "auroc_ci_high"}
    assert with_ci["auroc_ci_low"] < plain["auroc"] < with_ci["auroc_ci_high"]
    boot = evaluate(x, y, n_bootstrap=50, seed=3)
    assert {"fpr95_id_ci_low", "fpr95_ood_ci_high", "aupr_in_ci_low", "aupr_out_ci_high"} <= set(boot)
    assert boot == evaluate(x, y, n_bootstrap=50, seed=3)


def test_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="no bootstrap"):
        bootstrap_ci([1.0, 2.0], [0.0], ["aurc"])
    with pytest.raises(InvalidInputError, match="n_boot"):
        bootstrap_ci([1.0, 2.0], [0.0], n_boot=0)
    with pytest.raises(InvalidInputError, match="level"):
        bootstrap_ci([1.0, 2.0], [0.0], level=1.5)
