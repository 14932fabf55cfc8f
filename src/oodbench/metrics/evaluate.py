"""Every metric of one ID set against one OOD set, from one sort."""

from __future__ import annotations

import math

from numpy.typing import ArrayLike

from oodbench.metrics._validate import as_bool, as_scores, check_tpr, fpr_key, same_length
from oodbench.metrics.bootstrap import bootstrap_ci
from oodbench.metrics.delong import auroc_ci
from oodbench.metrics.ranking import Ranking
from oodbench.metrics.selective import rank_correctness, risk_coverage_area

__all__ = ["evaluate", "fpr_key", "interval_key"]


def interval_key(metric: str, bound: str) -> str:
    """The key of a metric's interval bound: ``auroc_ci_low``, ``fpr95_id_ci_high``."""
    return f"{metric}_ci_{bound}"


def evaluate(
    id_scores: ArrayLike,
    ood_scores: ArrayLike,
    *,
    id_correct: ArrayLike | None = None,
    tpr: float = 0.95,
    ci: bool = False,
    n_bootstrap: int = 0,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, float]:
    """All OOD metrics (and, given ``id_correct``, the ID-set metrics) under stable keys.

    Scores are confidences, higher = more in-distribution (see :mod:`oodbench.metrics.ood`).

    Keys (``95`` stands for ``tpr * 100``):
        ``auroc``: :func:`~oodbench.metrics.auroc`.
        ``fpr95_id``: :func:`~oodbench.metrics.fpr_at_tpr` with ``positive="id"`` (ODIN, Energy,
        KNN papers). ``fpr95_ood``: with ``positive="ood"`` (OpenOOD v1.5, pytorch-ood).
        ``aupr_in``, ``aupr_out``: OpenOOD's trapezoid AUPR, ID resp. OOD positive.
        ``ap_in``, ``ap_out``: scikit-learn's average precision, ID resp. OOD positive.
        With ``id_correct`` (one bool per ID sample: was the prediction right?):
        ``id_accuracy``, ``id_auroc`` (NaN when all ID predictions are right, or all wrong:
        undefined), ``aurc`` (:func:`~oodbench.metrics.aurc` of the ID scores).
        With ``ci``: ``auroc_ci_low`` / ``auroc_ci_high``, the interval at ``level`` from
        DeLong's variance (:func:`~oodbench.metrics.delong.auroc_ci`, logit scale, ``O(n log
        n)``). With ``n_bootstrap > 0``: ``<key>_ci_low`` / ``<key>_ci_high`` of ``fpr95_id``,
        ``fpr95_ood``, ``aupr_in`` and ``aupr_out`` from that many stratified bootstrap
        replicates seeded by ``seed`` (:func:`~oodbench.metrics.bootstrap.bootstrap_ci`; about
        ``n_bootstrap`` times the cost of the curves, so off by default).
    """
    target = check_tpr(tpr)
    conf = as_scores(id_scores, "id_scores")
    ood = as_scores(ood_scores, "ood_scores")
    ranking = Ranking.from_scores(conf, ood)
    flipped = ranking.flipped()
    stem = fpr_key(target)
    result = {
        "auroc": ranking.auroc(),
        f"{stem}_id": ranking.fpr_at_tpr(target),
        f"{stem}_ood": flipped.fpr_at_tpr(target),
        "aupr_in": ranking.aupr(),
        "aupr_out": flipped.aupr(),
        "ap_in": ranking.average_precision(),
        "ap_out": flipped.average_precision(),
    }
    if ci:
        interval = auroc_ci(conf, ood, level)
        result[interval_key("auroc", "low")] = interval.low
        result[interval_key("auroc", "high")] = interval.high
    if n_bootstrap:
        boot = (f"{stem}_id", f"{stem}_ood", "aupr_in", "aupr_out")
        for name, iv in bootstrap_ci(conf, ood, boot, n_boot=n_bootstrap, level=level, seed=seed,
                                     tpr=target).items():
            result[interval_key(name, "low")], result[interval_key(name, "high")] = iv.low, iv.high
    if id_correct is not None:
        correct = as_bool(id_correct, "id_correct")
        same_length(conf, correct, "id_scores", "id_correct")
        correctness = rank_correctness(conf, correct)
        both = correctness.n_pos > 0 and correctness.n_neg > 0
        result["id_accuracy"] = correctness.n_pos / conf.size
        result["id_auroc"] = correctness.auroc() if both else math.nan
        result["aurc"] = risk_coverage_area(correctness)
    return result
