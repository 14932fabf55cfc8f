"""OOD-detection metrics of one ID set against one OOD set.

Conventions (the same in every oodbench metric):

- Scores are confidences ``kappa(x)``: higher = more in-distribution, as the C-OOD paper's
  confidence functions (Galil, Dabbah & El-Yaniv, ICLR 2023). ID is the positive class unless a
  metric says otherwise; "OOD positive" means ranking by ``-kappa`` with OOD as positive, which is
  what OpenOOD v1.5 (``roc_curve(label == -1, -conf)``) and pytorch-ood (outlier scores) do.
- Thresholds run over the distinct score values; samples with equal scores are accepted or
  rejected together, so ties count as scikit-learn counts them and the input order never matters.
- Inputs: numpy arrays, torch tensors or lists; any real dtype (fp16, bf16, ints) becomes
  float64; ``±inf`` is allowed; NaN raises :class:`~oodbench.errors.NonFiniteError`, an empty
  side :class:`~oodbench.errors.EmptyInputError`.
"""

from __future__ import annotations

from typing import Literal

from numpy.typing import ArrayLike

from oodbench.errors import InvalidInputError
from oodbench.metrics._validate import as_scores, check_tpr
from oodbench.metrics.ranking import Ranking

Positive = Literal["id", "ood"]


def rank_id_vs_ood(id_scores: ArrayLike, ood_scores: ArrayLike) -> Ranking:
    """Validate both score sets and rank them with ID as the positive class."""
    return Ranking.from_scores(
        as_scores(id_scores, "id_scores"), as_scores(ood_scores, "ood_scores")
    )


def oriented(ranking: Ranking, positive: Positive) -> Ranking:
    """``ranking`` (ID positive) as seen with ``positive`` as the positive class."""
    if positive == "id":
        return ranking
    if positive == "ood":
        return ranking.flipped()
    raise InvalidInputError(f"positive must be 'id' or 'ood', got {positive!r}")


def auroc(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """Area under the ROC curve: ``P(s_id > s_ood) + 1/2 P(s_id = s_ood)``.

    The exact Mann-Whitney statistic over all ``n_id * n_ood`` pairs (the C-OOD paper's
    "ood-auroc"); symmetric in the choice of positive class. Equals
    ``sklearn.metrics.roc_auc_score(is_id, scores)`` (to rounding, ~1e-16).
    """
    return rank_id_vs_ood(id_scores, ood_scores).auroc()


def fpr_at_tpr(
    id_scores: ArrayLike, ood_scores: ArrayLike, tpr: float = 0.95, positive: Positive = "id"
) -> float:
    """False-positive rate at the threshold that reaches a true-positive rate of ``tpr``.

    - ``positive="id"``: the fraction of OOD samples accepted (score >= t) at the threshold t
      that accepts at least ``tpr`` of the ID samples. FPR95 of ODIN, Energy, ReAct and KNN and
      of the ImageNet-vs-iNat/SUN/Places/Textures leaderboard.
    - ``positive="ood"``: the fraction of ID samples flagged (score <= t) at the threshold t
      that flags at least ``tpr`` of the OOD samples. FPR@95 of OpenOOD v1.5 and pytorch-ood 0.4.0.

    The threshold runs over the distinct score values, from the strict end (the highest score for
    ``"id"``, the lowest for ``"ood"``), and the answer is taken at the first one whose TPR reaches
    ``tpr``: exactly ``fpr[np.argmax(tpr_curve >= tpr)]`` on
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``. OpenOOD keeps scikit-learn's
    default ``drop_intermediate=True``, which removes points on collinear stretches of the
    curve; when the first point reaching ``tpr`` is such a point OpenOOD reports the FPR of the
    next kept point, which can be higher.

    Args:
        tpr: the target true-positive rate, a fraction in [0, 1] (0.95, not 95).
        positive: ``"id"`` or ``"ood"``, the class whose recall is fixed at ``tpr``.
    """
    target = check_tpr(tpr)
    return oriented(rank_id_vs_ood(id_scores, ood_scores), positive).fpr_at_tpr(target)


def aupr_in(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """AUPR-In, OpenOOD's definition: the trapezoid area (``sklearn.metrics.auc``) under
    ``sklearn.metrics.precision_recall_curve(is_id, scores)``, ID positive.

    The curve ends at OpenOOD's anchor ``(recall 0, precision 1)``; scikit-learn >= 1.1 keeps
    every threshold (older versions cut the curve where recall first reached 1).
    """
    return rank_id_vs_ood(id_scores, ood_scores).aupr()


def aupr_out(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """AUPR-Out, OpenOOD's definition: as :func:`aupr_in` with OOD positive and the scores
    negated, ``sklearn.metrics.auc`` of ``precision_recall_curve(is_ood, -scores)``."""
    return rank_id_vs_ood(id_scores, ood_scores).flipped().aupr()


def average_precision_in(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """``sklearn.metrics.average_precision_score(is_id, scores)``: ``sum_j (R_j - R_{j-1}) P_j``
    over the thresholds from the highest, ID positive (no trapezoid interpolation)."""
    return rank_id_vs_ood(id_scores, ood_scores).average_precision()


def average_precision_out(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """``sklearn.metrics.average_precision_score(is_ood, -scores)``: average precision with OOD
    positive."""
    return rank_id_vs_ood(id_scores, ood_scores).flipped().average_precision()
