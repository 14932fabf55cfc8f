"""Metrics of the ID set alone: accuracy and selective prediction (does the confidence rank the
model's correct predictions above its mistakes?).

The C-OOD paper (Galil, Dabbah & El-Yaniv, ICLR 2023) reports them beside every OOD result as
"id_acc", "id-auroc" and "AURC". Confidences follow the oodbench convention: higher = more
confident.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from oodbench.errors import EmptyInputError, InvalidInputError
from oodbench.metrics._validate import as_bool, as_class_indices, as_scores, same_length
from oodbench.metrics.ranking import Ranking


def accuracy(pred: ArrayLike, labels: ArrayLike) -> float:
    """Top-1 accuracy: the fraction of samples with ``pred == labels``.

    Args:
        pred: predicted class indices (take ``logits.argmax(1)`` first).
        labels: true class indices, all >= 0 (ID samples only; -1 marks OOD in oodbench).
    """
    p, y = as_class_indices(pred, "pred"), as_class_indices(labels, "labels")
    same_length(p, y, "pred", "labels")
    ood = y < 0
    if ood.any():
        raise InvalidInputError(
            f"labels contain {int(ood.sum())} negative value(s) (OOD / no class); accuracy is "
            "defined on ID samples only: select them first, e.g. acts.subset(acts.labels >= 0)"
        )
    return int(np.count_nonzero(p == y)) / p.size


def rank_correctness(conf: ArrayLike, correct: ArrayLike) -> Ranking:
    """Validate ``conf`` and ``correct`` and rank them with correct predictions as positives."""
    c, ok = as_scores(conf, "conf"), as_bool(correct, "correct")
    same_length(c, ok, "conf", "correct")
    return Ranking.from_scores(c[ok], c[~ok])


def id_auroc(conf: ArrayLike, correct: ArrayLike) -> float:
    """AUROC of the confidence separating correct (positive) from wrong predictions.

    ``P(kappa_correct > kappa_wrong) + 1/2 P(tie)`` over all (correct, wrong) pairs: the C-OOD
    paper's "id-auroc" (there computed as ``n_s / (n_s + n_d)`` of its gamma correlation, which
    breaks ties by sort order; the two agree whenever the confidences are distinct).

    Raises:
        EmptyInputError: all predictions are correct, or all are wrong (AUROC is undefined).
    """
    ranking = rank_correctness(conf, correct)
    if ranking.n_pos == 0 or ranking.n_neg == 0:
        n, which = ranking.n_pos + ranking.n_neg, "correct" if ranking.n_neg == 0 else "wrong"
        raise EmptyInputError(
            f"id_auroc needs both correct and wrong predictions, but all {n} are {which}; "
            "the metric is undefined for this set"
        )
    return ranking.auroc()


def risk_coverage_area(ranking: Ranking) -> float:
    """AURC of a correctness ranking (positives = correct); see :func:`aurc`."""
    correct, wrong = ranking.cumulative()
    ends = np.concatenate([[0], correct + wrong])  # coverage at the end of each tie group
    errors = np.concatenate([[0], wrong])
    k = np.arange(1, ends[-1] + 1, dtype=np.float64)
    expected_errors = np.interp(k, ends, errors)  # linear inside a tie group
    return float(np.mean(expected_errors / k))


def aurc(conf: ArrayLike, correct: ArrayLike) -> float:
    """Area under the risk-coverage curve (Geifman, Uziel & El-Yaniv, ICLR 2019), lower is better.

    Sort the n samples by confidence, highest first. Accepting the top k gives coverage k/n and
    selective risk ``risk(k) = (errors among the top k) / k``;
    ``AURC = (1/n) sum_{k=1..n} risk(k)``, a fraction in [0, 1] (papers often print it x1000).
    This is the C-OOD code's ``AURC_calc`` when the confidences are distinct.

    Ties: samples with equal confidence have no order, so inside a group of g tied samples
    holding e errors, entered after N samples with E errors, the top ``k = N + i`` holds
    ``E + i * e / g`` errors: the expectation over a uniformly random order of the group.
    AURC is linear in those counts, so the result is the mean AURC over all tie orders, and it
    does not depend on the input order. (The C-OOD code takes whatever order ``argsort`` gives.)
    All-correct input gives 0.
    """
    return risk_coverage_area(rank_correctness(conf, correct))
