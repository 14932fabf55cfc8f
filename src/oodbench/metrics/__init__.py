"""Exact, vectorised OOD-detection and selective-prediction metrics.

Scores are confidences (higher = more in-distribution) and ID is the positive class unless a
metric says otherwise; ties count as in scikit-learn (AUROC: one half). Every ROC/PR metric comes
from one sort (:class:`~oodbench.metrics.ranking.Ranking`), in float64 with int64 counts,
``O(n log n)``. Conventions and references are in each function's docstring.

Uncertainty: :func:`auroc_ci` (DeLong's variance by the fast algorithm of Sun & Xu 2014),
:func:`delong_test` / :func:`mean_auroc_test` (paired tests between two detectors or models on
the same samples), :func:`bootstrap_ci` (seeded, vectorised intervals of FPR@95 and AUPR).
"""

from oodbench.metrics.bootstrap import bootstrap_ci
from oodbench.metrics.delong import auroc_ci, auroc_variance, delong_test, mean_auroc_test
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
    "auroc_ci",
    "auroc_variance",
    "bootstrap_ci",
    "delong_test",
    "mean_auroc_test",
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
