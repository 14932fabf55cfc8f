"""Exact, vectorised OOD-detection and selective-prediction metrics.

Scores are confidences (higher = more in-distribution) and ID is the positive class unless a
metric says otherwise; ties count as in scikit-learn (AUROC: one half). Every ROC/PR metric comes
from one sort (:class:`~oodbench.metrics.ranking.Ranking`), in float64 with int64 counts,
``O(n log n)``. Conventions and references are in each function's docstring.
"""

from oodbench.metrics.evaluate import evaluate
from oodbench.metrics.ood import (
    aupr_in,
    aupr_out,
    auroc,
    average_precision_in,
    average_precision_out,
    fpr_at_tpr,
)
from oodbench.metrics.selective import accuracy, aurc, id_auroc

__all__ = [
    "accuracy",
    "aupr_in",
    "aupr_out",
    "aurc",
    "auroc",
    "average_precision_in",
    "average_precision_out",
    "evaluate",
    "fpr_at_tpr",
    "id_auroc",
]
