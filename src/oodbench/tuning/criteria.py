"""The criteria a tuning search maximises (or minimises) and the ID-only metrics.

With OOD validation data any key of :func:`oodbench.metrics.evaluate` that ranks detectors
(:data:`OOD_CRITERIA`); without, how well the score separates correct from wrong ID predictions
(:data:`ID_CRITERIA`: the C-OOD paper's ID-AUROC, or AURC, lower is better).
"""

from __future__ import annotations

import numpy as np

from oodbench import metrics
from oodbench.errors import InvalidInputError

#: criterion -> True when larger is better
OOD_CRITERIA = {
    "auroc": True, "fpr95_id": False, "fpr95_ood": False, "aupr_in": True, "aupr_out": True,
    "ap_in": True, "ap_out": True,
}
ID_CRITERIA = {"id_auroc": True, "aurc": False}


def resolve_criterion(criterion: str | None, with_ood: bool) -> tuple[str, bool]:
    """``(name, larger is better)``: ``criterion`` checked, or the default (``"auroc"`` with
    OOD data, ``"id_auroc"`` without)."""
    name = criterion or ("auroc" if with_ood else "id_auroc")
    allowed = {**OOD_CRITERIA, **ID_CRITERIA} if with_ood else ID_CRITERIA
    if name not in allowed:
        hint = "" if with_ood or name not in OOD_CRITERIA else " (it needs ood_val)"
        raise InvalidInputError(
            f"tune: unknown criterion {name!r}{hint}; use one of {sorted(allowed)}"
        )
    return name, allowed[name]


def id_metrics(scores: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """ID accuracy, ID-AUROC and AURC of ``scores`` against the per-sample correctness."""
    return {
        "id_accuracy": float(correct.mean()),
        "id_auroc": metrics.id_auroc(scores, correct),
        "aurc": metrics.aurc(scores, correct),
    }
