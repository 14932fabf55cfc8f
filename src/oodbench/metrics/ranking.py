"""The one ranking kernel every ROC/PR metric is computed from.

Sort once, group equal scores, count: with the distinct scores ``u_1 < ... < u_m`` of the pooled
sample, :class:`Ranking` holds how many positives and negatives have each score. Every curve is
a cumulative sum of those counts taken from the strict end (the highest score first), so ties
enter a curve together, as in scikit-learn's ``_binary_clf_curve``; nothing depends on the order
of the input. Cost: two ``O(n log n)`` sorts, one linear merge and ``O(n)`` counting; counts are
int64, so curves are exact integer ratios and AUROC is one exactly rounded division.

Positives are the class that high scores point to (ID for confidences);
:meth:`Ranking.flipped` swaps the roles and negates the scores, which is how OOD-positive
metrics (OpenOOD's ``-conf`` with ``label == -1`` as positive) are taken from the same sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from numpy.typing import NDArray

Float = NDArray[np.float64]
Int = NDArray[np.int64]


@dataclass(frozen=True)
class Ranking:
    """Counts of positives and negatives at each distinct score.

    Attributes:
        values: the distinct scores, increasing (``-0.0`` and ``0.0`` are one value).
        pos: ``pos[j]`` = number of positives whose score equals ``values[j]``.
        neg: ``neg[j]`` = number of negatives whose score equals ``values[j]``.
    """

    values: Float
    pos: Int
    neg: Int

    @classmethod
    def from_scores(cls, positives: Float, negatives: Float) -> Ranking:
        """Rank 1-D float64 scores of the positive and the negative class (NaN-free).

        Either side may be empty (selective metrics allow "no errors"); the curve methods need
        both sides, which the public metrics check first. The sort runs where the compute
        backend says (:mod:`oodbench.compute`): NumPy on the CPU path, ``torch.sort`` on the
        torch path's device; the counts are the same integers either way.
        """
        from oodbench.compute import current

        backend = current()
        if backend.kind == "torch":
            return cls._from_scores_torch(positives, negatives, backend.device)
        p, q = np.sort(positives), np.sort(negatives)
        pooled = np.concatenate([p, q])
        # two sorted runs: the stable sort (timsort) merges them in linear time
        order = np.argsort(pooled, kind="stable")
        merged = pooled[order]
        last = np.ones(merged.size, dtype=bool)  # the last sample of each group of equal scores
        np.not_equal(merged[1:], merged[:-1], out=last[:-1])
        ends = np.flatnonzero(last)
        pos = np.diff(np.cumsum(order < p.size)[ends], prepend=0)
        neg = np.diff(ends + 1, prepend=0) - pos
        values = merged[ends]
        return cls(values, pos.astype(np.int64), neg.astype(np.int64))

    @classmethod
    def _from_scores_torch(cls, positives: Float, negatives: Float, device: torch.device) -> Ranking:
        """``from_scores`` with one stable ``torch.sort`` of the pooled scores on ``device``."""
        pooled = torch.from_numpy(np.concatenate([positives, negatives])).to(device)
        merged, order = torch.sort(pooled, stable=True)
        last = torch.ones(merged.numel(), dtype=torch.bool, device=merged.device)
        last[:-1] = merged[1:] != merged[:-1]
        ends = torch.nonzero(last).squeeze(1)
        first = torch.zeros(1, dtype=torch.int64, device=merged.device)
        pos = torch.diff(torch.cumsum(order < len(positives), dim=0)[ends], prepend=first)
        neg = torch.diff(ends + 1, prepend=first) - pos
        host = [t.cpu().numpy() for t in (merged[ends], pos, neg)]
        return cls(host[0].astype(np.float64), host[1].astype(np.int64), host[2].astype(np.int64))

    @cached_property
    def n_pos(self) -> int:
        return int(self.pos.sum())

    @cached_property
    def n_neg(self) -> int:
        return int(self.neg.sum())

    def flipped(self) -> Ranking:
        """The ranking of the negated scores with the roles of the classes swapped."""
        return Ranking(-self.values[::-1], self.neg[::-1], self.pos[::-1])

    def cumulative(self) -> tuple[Int, Int]:
        """``tps[j]``, ``fps[j]``: positives and negatives scoring at least the ``j``-th highest
        distinct score, i.e. accepted by the threshold ``t_j = values[m - 1 - j]``."""
        return np.cumsum(self.pos[::-1]), np.cumsum(self.neg[::-1])

    def auroc(self) -> float:
        """Mann-Whitney: ``P(s_pos > s_neg) + 1/2 P(s_pos = s_neg)`` over all pairs.

        ``2U = sum_j neg_j (2 * #pos above u_j + pos_j)`` is an exact int64 (valid while
        ``n_pos * n_neg < 4.6e18``); Python's int division rounds ``2U / (2 n_pos n_neg)`` once,
        correctly. Equals the trapezoid area under the full ROC curve.
        """
        return int(twice_u_counts(self.pos, self.neg)) / (2 * self.n_pos * self.n_neg)

    def roc_curve(self) -> tuple[Float, Float, Float]:
        """``fpr, tpr, thresholds`` as ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``:
        one point per distinct score from the highest, after the point ``(0, 0)`` at ``+inf``."""
        tps, fps = self.cumulative()
        fpr = np.concatenate([[0], fps]) / self.n_neg
        tpr = np.concatenate([[0], tps]) / self.n_pos
        return fpr, tpr, np.concatenate([[np.inf], self.values[::-1]])

    def fpr_at_tpr(self, tpr: float) -> float:
        """FPR at the first threshold, from the highest, whose TPR reaches ``tpr``.

        The same as ``fpr[np.argmax(tpr_curve >= tpr)]`` on :meth:`roc_curve` (the TPRs are the
        same float divisions as scikit-learn's, so the comparison agrees bit for bit).
        """
        return float(fpr_at_tpr_counts(self.pos, self.neg, tpr))

    def precision_recall_curve(self) -> tuple[Float, Float, Float]:
        """``precision, recall, thresholds`` as ``sklearn.metrics.precision_recall_curve``
        (scikit-learn >= 1.1, which keeps every threshold): recall decreasing, one point per
        distinct score from the lowest, then the point ``(recall 0, precision 1)``."""
        tps, fps = self.cumulative()
        precision = tps / (tps + fps)
        recall = tps / self.n_pos
        return (
            np.concatenate([precision[::-1], [1.0]]),
            np.concatenate([recall[::-1], [0.0]]),
            self.values,
        )

    def aupr(self) -> float:
        """Trapezoid area under :meth:`precision_recall_curve` (``sklearn.metrics.auc``)."""
        return float(aupr_counts(self.pos, self.neg))

    def average_precision(self) -> float:
        """``AP = sum_j (R_j - R_{j-1}) P_j`` over thresholds from the highest
        (``sklearn.metrics.average_precision_score``: a step function, no interpolation)."""
        precision, recall, _ = self.precision_recall_curve()
        return float(np.sum((recall[:-1] - recall[1:]) * precision[:-1]))


# -- the curve maths on count arrays (one ranking, or a batch of re-weighted rankings) -----------
def twice_u_counts(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """``2U = sum_j neg_j (2 * #pos above u_j + pos_j)`` over the last axis (int64 counts)."""
    above = pos.sum(axis=-1, keepdims=True) - np.cumsum(pos, axis=-1)
    return np.sum(neg * (2 * above + pos), axis=-1)


def fpr_at_tpr_counts(pos: np.ndarray, neg: np.ndarray, tpr: float) -> Float:
    """:meth:`Ranking.fpr_at_tpr` over the last axis of count arrays ``(..., m)``.

    Counts may be zero at some distinct scores (a bootstrap replicate that drew none of them):
    such a score repeats the previous point of the curve and changes nothing.
    """
    tps, fps = np.cumsum(pos[..., ::-1], axis=-1), np.cumsum(neg[..., ::-1], axis=-1)
    tpr_curve = tps / tps[..., -1:]
    first = np.argmax(tpr_curve >= tpr, axis=-1)[..., None]
    fpr = np.take_along_axis(fps, first, axis=-1)[..., 0] / fps[..., -1]
    return np.where(tpr <= 0.0, 0.0, fpr)


def aupr_counts(pos: np.ndarray, neg: np.ndarray) -> Float:
    """:meth:`Ranking.aupr` over the last axis of count arrays ``(..., m)``.

    The trapezoids are summed from the strict end, starting at the anchor ``(recall 0,
    precision 1)``: ``sum_j (R_j - R_{j-1}) (P_j + P_{j-1}) / 2``. Where no sample lies at or
    above a threshold (only possible with zero counts) precision is set to the anchor's 1; that
    point has recall 0 like the anchor, so it adds no area.
    """
    tps, fps = np.cumsum(pos[..., ::-1], axis=-1), np.cumsum(neg[..., ::-1], axis=-1)
    accepted = tps + fps
    precision = np.divide(tps, accepted, out=np.ones(tps.shape), where=accepted > 0)
    recall = tps / tps[..., -1:]
    area = recall[..., 0] * (precision[..., 0] + 1.0)
    area += np.sum(np.diff(recall, axis=-1) * (precision[..., 1:] + precision[..., :-1]), axis=-1)
    return area / 2
