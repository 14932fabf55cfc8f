"""Which rows and classes a training run uses: class selection and the up-front label check."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from oodbench.errors import ClassCountMismatchError, EmptyInputError, InvalidInputError

#: a chosen class with fewer training rows than this draws a ``FewRowsWarning``
FEW_ROWS = 2


class FewRowsWarning(UserWarning):
    """A class the head is trained on has very few rows: its weights rest on one example."""


def select_classes(
    labels: np.ndarray, classes: Sequence[int] | np.ndarray | None, num_classes: int, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, rows, new_labels)`` for training on ``classes`` of ``num_classes``.

    ``classes=None`` keeps every class ``0 .. num_classes - 1``; a label at or above
    ``num_classes`` is then an error (it has no output in the head), raised before any
    training. With ``classes`` given, rows of other classes are dropped and labels become
    positions in ``classes`` (as :meth:`Activations.restrict_classes`). Rows labelled -1 (no
    ID class) are always dropped. ``what`` names the data in messages.

    A class given in ``classes`` without a single row is an error (the head would get an
    output that nothing trained); one with fewer than ``FEW_ROWS`` rows draws a
    :class:`FewRowsWarning`.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if classes is None:
        chosen = np.arange(num_classes, dtype=np.int64)
        high = int(labels.max()) if labels.size else -1
        if high >= num_classes:
            raise ClassCountMismatchError(
                f"{what}: label {high} lies outside the head's {num_classes} classes "
                f"[0, {num_classes}); pass num_classes={high + 1} for a head with every label, "
                "or classes=[...] to keep some of them"
            )
    else:
        chosen = np.asarray(classes, dtype=np.int64).reshape(-1)
        if chosen.size == 0 or np.unique(chosen).size != chosen.size:
            raise InvalidInputError(f"{what}: classes must be a non-empty list of distinct class ids")
        if chosen.min() < 0:
            raise InvalidInputError(f"{what}: classes must be >= 0; got {int(chosen.min())}")
    lookup = np.full(max(int(chosen.max()), int(labels.max(initial=0))) + 1, -1, dtype=np.int64)
    lookup[chosen] = np.arange(chosen.size)
    new_labels = np.where(labels >= 0, lookup[np.clip(labels, 0, None)], -1)
    rows = np.flatnonzero(new_labels >= 0)
    if rows.size == 0:
        raise EmptyInputError(
            f"{what}: no labelled rows of the chosen classes {chosen[:10].tolist()} to train on"
        )
    if classes is not None:
        _check_rows_per_class(chosen, np.bincount(new_labels[rows], minlength=chosen.size), what)
    return chosen, rows, new_labels[rows]


def _check_rows_per_class(chosen: np.ndarray, counts: np.ndarray, what: str) -> None:
    """Refuse chosen classes without rows; warn about those with fewer than ``FEW_ROWS``."""
    empty = chosen[counts == 0]
    if empty.size:
        raise EmptyInputError(
            f"{what}: {empty.size} of the {chosen.size} chosen classes have no row to train on: "
            f"{empty[:20].tolist()}{' ...' if empty.size > 20 else ''}; drop them from classes "
            "or add their rows to the training activations"
        )
    few = chosen[counts < FEW_ROWS]
    if few.size:
        warnings.warn(
            f"{what}: {few.size} of the {chosen.size} chosen classes have fewer than {FEW_ROWS} "
            f"rows ({few[:20].tolist()}{' ...' if few.size > 20 else ''}); their outputs are "
            "learnt from a single example",
            FewRowsWarning,
            stacklevel=4,
        )
