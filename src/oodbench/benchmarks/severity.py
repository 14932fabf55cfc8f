"""The C-OOD severity algorithm (Galil, Dabbah & El-Yaniv, ICLR 2023, arXiv 2302.11893), on
arrays: per-class severities, the severity windows and levels, the estimation / test split.

Steps 1-4 of :mod:`oodbench.benchmarks.cood` (which runs them on a model's activations): split
each pool class's images per class into estimation and test images; severity of a class = mean
kappa on its estimation images; sort the classes by severity and take every window of
``window`` consecutive classes, scored by their mean severity; level i is the window starting at
``int(q_i * n_windows)`` for ``q = linspace(0, 1, n_levels)`` (the last start moved back by one
so it stays in range, as the paper's code does). Reference code:
github.com/mdabbah/COOD_benchmarking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from oodbench.errors import EmptyInputError, InvalidInputError, NonFiniteError

SELECTIONS = ("percentiles", "disjoint")


def group_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, inverse, counts)`` as ``np.unique(labels, return_inverse, return_counts)``.

    Uses hashing (``pandas.factorize``, ``O(n)``) instead of sorting every label, then sorts the
    few distinct classes, so labels need not be contiguous (wnid offsets are fine).
    """
    labels = np.asarray(labels).reshape(-1)
    inverse, classes = pd.factorize(labels, sort=True)
    inverse = inverse.astype(np.int64, copy=False)
    return np.asarray(classes), inverse, np.bincount(inverse, minlength=len(classes))


def per_class_mean(
    scores: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean score of every class present in ``labels`` (labels need not be contiguous).

    Returns ``(classes, means, counts)``: the sorted distinct labels, the mean of ``scores``
    over each class's samples and how many samples each has (``np.unique`` + ``np.bincount``).
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if scores.shape != labels.shape:
        raise InvalidInputError(
            f"per_class_mean: {scores.size} scores but {labels.size} labels; need one label per score"
        )
    if scores.size == 0:
        raise EmptyInputError("per_class_mean: no samples")
    if not np.isfinite(scores).all():
        raise NonFiniteError(
            f"per_class_mean: {int((~np.isfinite(scores)).sum())} scores are NaN or inf"
        )
    classes, inverse, counts = group_labels(labels)
    sums = np.bincount(inverse, weights=scores, minlength=classes.size)
    return classes, sums / counts, counts


@dataclass(frozen=True)
class SeverityLevels:
    """The windows chosen as severity levels (level 0 = easiest).

    Attributes:
        classes: per level, the indices (into ``class_scores``) of its ``window`` classes, in
            ascending order of score.
        starts: per level, the start of its window in the ascending order of class scores.
        scores: per level, the window's mean class score (the paper's severity score).
        percentiles: per level, its position in the window order: the paper's ``q_i`` with
            ``selection="percentiles"``, ``start / (n_windows - 1)`` with ``"disjoint"``.
        order: every class index in ascending order of score (ties keep index order).
    """

    classes: list[np.ndarray]
    starts: np.ndarray
    scores: np.ndarray
    percentiles: np.ndarray
    order: np.ndarray


def validate_levels(n_classes: int, window: int, n_levels: int, selection: str) -> None:
    """Raise ``InvalidInputError`` unless ``n_levels`` windows of ``window`` classes fit."""
    if selection not in SELECTIONS:
        raise InvalidInputError(f"selection must be one of {SELECTIONS}; got {selection!r}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise InvalidInputError(f"window must be a positive integer; got {window!r}")
    if isinstance(n_levels, bool) or not isinstance(n_levels, (int, np.integer)):
        raise InvalidInputError(f"n_levels must be an integer; got {n_levels!r}")
    if n_classes == 0:
        raise EmptyInputError("severity levels need at least one OOD class; got none")
    if window > n_classes:
        raise InvalidInputError(
            f"window={window} is larger than the {n_classes} OOD classes of the pool: use "
            f"window <= {n_classes} (the paper uses the number of ID classes, 1000, with a pool "
            "of ~10,000 ImageNet-21k classes)"
        )
    n_windows = n_classes - window + 1
    if selection == "percentiles":
        if n_levels < 2:
            raise InvalidInputError(
                f"selection='percentiles' needs n_levels >= 2 (levels at linspace(0, 1, "
                f"n_levels)); got {n_levels}"
            )
        if n_levels > n_windows:
            raise InvalidInputError(
                f"{n_classes} classes give only {n_windows} windows of {window} classes, fewer "
                f"than n_levels={n_levels}: some levels would coincide. Use window <= "
                f"{n_classes - n_levels + 1} or n_levels <= {n_windows}"
            )
    else:
        n_blocks = n_classes // window
        if not 1 <= n_levels <= n_blocks:
            raise InvalidInputError(
                f"selection='disjoint': {n_classes} classes hold {n_blocks} non-overlapping "
                f"windows of {window}; n_levels must lie in [1, {n_blocks}], got {n_levels}. "
                f"Use window <= {n_classes // max(n_levels, 1)} or fewer levels"
            )


def severity_windows(
    class_scores: np.ndarray,
    *,
    window: int,
    n_levels: int = 11,
    selection: str = "percentiles",
) -> SeverityLevels:
    """Sort classes by score, score every window of ``window`` consecutive classes, pick levels.

    ``selection="percentiles"`` (the paper): over the ``n_windows = n_classes - window + 1``
    sliding windows, level i starts at ``int(q_i * n_windows)`` for ``q = linspace(0, 1,
    n_levels)``, the last start moved back by one so it stays in range.

    ``selection="disjoint"``: the sorted classes are cut into ``n_classes // window``
    non-overlapping blocks and ``n_levels`` blocks are picked at evenly spaced block indices
    ``round(linspace(0, n_blocks - 1, n_levels))``; no class is in two levels.

    Window means use a cumulative sum, so 10,000 classes cost microseconds.
    """
    scores = np.asarray(class_scores, dtype=np.float64)
    if scores.ndim != 1:
        raise InvalidInputError(
            f"class_scores must be 1-D (one score per OOD class); got shape {scores.shape}"
        )
    if not np.isfinite(scores).all():
        raise NonFiniteError(
            f"class_scores hold {int((~np.isfinite(scores)).sum())} NaN/inf values; every OOD "
            "class needs a finite mean confidence"
        )
    n = scores.size
    validate_levels(n, window, n_levels, selection)
    window, n_levels = int(window), int(n_levels)
    order = np.argsort(scores, kind="stable")
    cums = np.concatenate([[0.0], np.cumsum(scores[order])])
    window_means = (cums[window:] - cums[:-window]) / window  # n_windows sliding windows
    n_windows = window_means.size
    if selection == "percentiles":
        percentiles = np.linspace(0.0, 1.0, n_levels)
        starts = (percentiles * n_windows).astype(np.int64)
        starts[-1] -= 1
    else:
        blocks = np.round(np.linspace(0, n // window - 1, n_levels)).astype(np.int64)
        starts = blocks * window
        percentiles = starts / max(n_windows - 1, 1)
    classes = [order[s : s + window] for s in starts]
    return SeverityLevels(
        classes=classes,
        starts=starts,
        scores=window_means[starts],
        percentiles=percentiles,
        order=order,
    )


def severity_levels(
    class_scores: np.ndarray,
    *,
    window: int,
    n_levels: int = 11,
    selection: str = "percentiles",
) -> list[np.ndarray]:
    """The class indices of each severity level (level 0 = easiest); see ``severity_windows``.

    ``class_scores[c]`` is the severity score of OOD class ``c`` (the model's mean kappa on the
    class's estimation images). Returns ``n_levels`` integer arrays of ``window`` indices each.
    """
    return severity_windows(
        class_scores, window=window, n_levels=n_levels, selection=selection
    ).classes


def split_per_class(
    labels: np.ndarray,
    *,
    estimation_fraction: float = 0.75,
    images_per_class: int | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded per-class split of a pool into estimation and test samples.

    Each class first keeps a random ``images_per_class`` of its samples (all when ``None``);
    ``round(estimation_fraction * n_c)`` of them (at least one, and at least one left for test)
    are estimation samples, the rest test samples. Classes with fewer than
    ``images_per_class`` samples (or fewer than 2) are dropped.

    Returns ``(estimation, test, dropped)``: sorted sample indices, sorted sample indices and the
    dropped class labels.
    """
    if not 0.0 < estimation_fraction < 1.0:
        raise InvalidInputError(
            f"estimation_fraction must lie strictly between 0 and 1; got {estimation_fraction}"
        )
    if images_per_class is not None and images_per_class < 2:
        raise InvalidInputError(f"images_per_class must be >= 2; got {images_per_class}")
    labels = np.asarray(labels).reshape(-1)
    classes, inverse, counts = group_labels(labels)
    rng = np.random.default_rng(seed)
    # a random rank within each class: shuffle, then stable-sort by class (a radix sort when the
    # class index fits in 16 bits)
    perm = rng.permutation(labels.size)
    key = inverse[perm].astype(np.uint16 if classes.size <= 1 << 16 else np.int64)
    order = perm[np.argsort(key, kind="stable")]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(labels.size, dtype=np.int64)
    rank[order] = np.arange(labels.size) - starts[inverse[order]]
    need = 2 if images_per_class is None else images_per_class
    keep = counts if images_per_class is None else np.minimum(counts, images_per_class)
    n_est = np.clip(np.round(estimation_fraction * keep).astype(np.int64), 1, keep - 1)
    usable = counts >= need
    used = usable[inverse] & (rank < keep[inverse])
    is_est = used & (rank < n_est[inverse])
    return np.flatnonzero(is_est), np.flatnonzero(used & ~is_est), classes[~usable]
