"""Splitting labelled ID activations into a fit part and an ID validation part, by class.

Tuning needs ID validation samples the detector was not fitted on; the held-out-class protocol
also needs every validation class to occur in the fit part (a variant trained on a class must
have seen it for its validation images to be simulated ID). With few images per class (the
1,300-image ImageNet set has 1-7 per class), a random split would leave most validation
classes without a fit image, so the split is per class:

    for every class with at least ``min_per_class`` samples: ``per_class`` random sample(s) of
    it go to validation, the rest to fit; classes with fewer samples go entirely to fit.
"""

from __future__ import annotations

import numpy as np

from oodbench.errors import InvalidInputError


def split_by_class(
    labels: np.ndarray, seed: int = 0, *, per_class: int = 1, min_per_class: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """``(fit_rows, val_rows)``: sorted row indices (see the module docstring).

    Rows with label -1 (no ID class) go to fit. Raises when no class has ``min_per_class``
    samples (there would be no validation set).
    """
    if not 1 <= per_class < min_per_class:
        raise InvalidInputError(
            f"split_by_class needs 1 <= per_class < min_per_class; got {per_class} and {min_per_class}"
        )
    labels = np.asarray(labels)
    rng = np.random.default_rng([seed, 1])
    val: list[int] = []
    for c in np.unique(labels[labels >= 0]):
        rows = np.flatnonzero(labels == c)
        if rows.size >= min_per_class:
            val += rng.choice(rows, size=per_class, replace=False).tolist()
    if not val:
        raise InvalidInputError(
            f"split_by_class: no class has {min_per_class} or more samples, so no validation "
            "sample can be set aside; give a separate id_val set"
        )
    val_rows = np.sort(np.asarray(val, dtype=np.int64))
    return np.setdiff1d(np.arange(labels.size), val_rows), val_rows
