"""Seeded, vectorised bootstrap intervals for FPR@95, AUPR and AUROC.

The stratified bootstrap (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993; the
default of pROC for ROC statistics): each replicate draws ``n_id`` ID scores and ``n_ood`` OOD
scores with replacement, each set from itself, and recomputes the metric; the interval is the
percentile interval ``[q_{alpha/2}, q_{1-alpha/2}]`` of the replicates, around the metric of the
full sample.

No replicate is sorted: a resample only re-weights the distinct scores of the one sort of the
full sample (:class:`~oodbench.metrics.ranking.Ranking`), so a batch of replicates is a
``(B, m)`` matrix of counts per distinct score (``np.bincount``) and every metric is a
cumulative sum along its rows, the same curve maths as the point metrics
(:func:`~oodbench.metrics.ranking.fpr_at_tpr_counts`, :func:`~oodbench.metrics.ranking.aupr_counts`).
Replicates are computed in chunks that keep each count matrix to about ``4e6`` cells.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from oodbench.errors import InvalidInputError
from oodbench.metrics._validate import check_tpr, fpr_key
from oodbench.metrics.delong import Interval
from oodbench.metrics.ood import rank_id_vs_ood
from oodbench.metrics.ranking import aupr_counts, fpr_at_tpr_counts, twice_u_counts

Counts = NDArray[np.int64]
_CELLS = 4_000_000  # count-matrix cells per chunk of replicates


def _flip(pos: Counts, neg: Counts) -> tuple[Counts, Counts]:
    """Counts of the OOD-positive ranking (:meth:`Ranking.flipped`)."""
    return neg[..., ::-1], pos[..., ::-1]


def _auroc(pos: Counts, neg: Counts) -> NDArray[np.float64]:
    n_pos, n_neg = pos.sum(axis=-1), neg.sum(axis=-1)
    return twice_u_counts(pos, neg) / (2.0 * n_pos * n_neg)


def metric_functions(tpr: float = 0.95) -> dict[str, Callable[[Counts, Counts], np.ndarray]]:
    """Metric name (``evaluate``'s keys) -> function of ``(pos, neg)`` count arrays."""
    stem = fpr_key(tpr)
    return {
        "auroc": _auroc,
        f"{stem}_id": lambda p, n: fpr_at_tpr_counts(p, n, tpr),
        f"{stem}_ood": lambda p, n: fpr_at_tpr_counts(*_flip(p, n), tpr),
        "aupr_in": aupr_counts,
        "aupr_out": lambda p, n: aupr_counts(*_flip(p, n)),
    }


def bootstrap_replicates(
    id_scores: ArrayLike,
    ood_scores: ArrayLike,
    metrics: Sequence[str] = ("fpr95_id", "fpr95_ood", "aupr_in", "aupr_out"),
    *,
    n_boot: int = 1000,
    seed: int = 0,
    tpr: float = 0.95,
) -> dict[str, NDArray[np.float64]]:
    """``n_boot`` stratified bootstrap values of each metric (seeded: the same call, the same
    values)."""
    functions = metric_functions(check_tpr(tpr))
    unknown = sorted(set(metrics) - set(functions))
    if unknown:
        raise InvalidInputError(
            f"no bootstrap for metric(s) {unknown}; choose from {sorted(functions)}"
        )
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise InvalidInputError(f"n_boot must be a positive integer; got {n_boot!r}")
    ranking = rank_id_vs_ood(id_scores, ood_scores)
    ids = np.searchsorted(ranking.values, np.asarray(id_scores, dtype=np.float64))
    oods = np.searchsorted(ranking.values, np.asarray(ood_scores, dtype=np.float64))
    m = ranking.values.size
    rng = np.random.default_rng(seed)
    chunk = max(1, _CELLS // max(m, ids.size, oods.size))
    out: dict[str, list[np.ndarray]] = {name: [] for name in metrics}
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        pos = _resampled_counts(ids, b, m, rng)
        neg = _resampled_counts(oods, b, m, rng)
        for name in metrics:
            out[name].append(functions[name](pos, neg))
    return {name: np.concatenate(values) for name, values in out.items()}


def _resampled_counts(positions: np.ndarray, b: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """(b, m) counts per distinct score of ``b`` resamples (with replacement) of ``positions``,
    the rows' indices into the ``m`` distinct scores."""
    draws = positions[rng.integers(0, positions.size, (b, positions.size))]
    offsets = (np.arange(b) * m)[:, None]
    return np.bincount((draws + offsets).ravel(), minlength=b * m).reshape(b, m)


def bootstrap_ci(
    id_scores: ArrayLike,
    ood_scores: ArrayLike,
    metrics: Sequence[str] = ("fpr95_id", "fpr95_ood", "aupr_in", "aupr_out"),
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    tpr: float = 0.95,
) -> dict[str, Interval]:
    """Percentile bootstrap intervals of ``metrics`` (``evaluate``'s keys), each around the
    metric of the full sample."""
    if not 0.0 < level < 1.0:
        raise InvalidInputError(f"level must be a fraction in (0, 1), e.g. 0.95; got {level!r}")
    reps = bootstrap_replicates(id_scores, ood_scores, metrics, n_boot=n_boot, seed=seed, tpr=tpr)
    ranking = rank_id_vs_ood(id_scores, ood_scores)
    functions = metric_functions(tpr)
    alpha = 1.0 - level
    out = {}
    for name, values in reps.items():
        estimate = float(functions[name](ranking.pos, ranking.neg))
        low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2])
        out[name] = Interval(estimate, float(low), float(high), level)
    return out
