"""DeLong's variance of AUROC, its 95 % intervals and paired tests between detectors or models.

DeLong, DeLong & Clarke-Pearson, "Comparing the areas under two or more correlated receiver
operating characteristic curves: a nonparametric approach", Biometrics 44 (1988). AUROC is the
two-sample U-statistic ``A = 1/(m n) sum_ij psi(x_i, y_j)`` with ``psi(x, y) = 1 if x > y,
1/2 if x = y, 0 otherwise``, over the ``m`` ID scores ``x`` and ``n`` OOD scores ``y``. Its
*structural components* are

    V10(x_i) = 1/n sum_j psi(x_i, y_j)      (one per ID sample)
    V01(y_j) = 1/m sum_i psi(x_i, y_j)      (one per OOD sample)

and DeLong's variance estimate is ``S10 / m + S01 / n`` with ``S10``, ``S01`` the sample
variances (``1/(m-1)``, ``1/(n-1)``) of the components. For several AUROCs computed on shared
samples the components' covariances give the covariance matrix; a linear contrast
``sum_k w_k A_k`` then has variance ``sum_sets var(sum_k w_k V_k) / n_set`` over each set of
samples, the components of the AUROCs that share the set being added sample by sample.

The components come from mid-ranks, the fast algorithm of Sun & Xu, "Fast implementation of
DeLong's algorithm for comparing the areas under correlated receiver operating characteristic
curves", IEEE Signal Processing Letters 21 (2014): with ``T_z`` the mid-ranks of the pooled
scores and ``T_x``, ``T_y`` the mid-ranks within each set,

    V10(x_i) = (T_z(x_i) - T_x(x_i)) / n,     V01(y_j) = 1 - (T_z(y_j) - T_y(y_j)) / m,

``O((m + n) log(m + n))`` instead of the ``O(m n)`` of the definition. Intervals are Wald
intervals ``A +- z_{1-alpha/2} sqrt(var)`` clipped to [0, 1] (pROC's ``ci.auc(method =
"delong")``), or the same on the logit scale (the default, see :func:`auroc_ci`); both are
degenerate (zero width) when the two sets are perfectly separated.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr, ndtri
from scipy.stats import rankdata

from oodbench.errors import InvalidInputError
from oodbench.metrics._validate import as_scores

Float = NDArray[np.float64]


@dataclass(frozen=True)
class AurocComponents:
    """AUROC of one ID set against one OOD set and its structural components.

    Attributes:
        auroc: ``P(s_id > s_ood) + 1/2 P(s_id = s_ood)``.
        id_part: ``V10``, one value per ID sample (its AUROC against the whole OOD set).
        ood_part: ``V01``, one value per OOD sample (the share of ID samples scored above it).
    """

    auroc: float
    id_part: Float
    ood_part: Float

    def variance(self) -> float:
        """DeLong's variance estimate ``var(V10) / m + var(V01) / n`` (NaN with one sample)."""
        return contrast_variance([(1.0, self, "id", "ood")])


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided confidence interval."""

    estimate: float
    low: float
    high: float
    level: float = 0.95


@dataclass(frozen=True)
class Comparison:
    """A test of ``a - b = 0`` for two AUROCs (or two means of AUROCs).

    ``difference`` = a - b, ``se`` its standard error, ``z`` = difference / se, ``p_value``
    two-sided, ``low``/``high`` the interval of the difference at ``level``.
    """

    difference: float
    se: float
    z: float
    p_value: float
    low: float
    high: float
    level: float = 0.95

    def significant(self, alpha: float = 0.05) -> bool:
        """Whether the difference is significant at ``alpha`` (two-sided)."""
        return bool(self.p_value < alpha)


def auroc_components(id_scores: ArrayLike, ood_scores: ArrayLike) -> AurocComponents:
    """AUROC and its structural components from mid-ranks (Sun & Xu 2014); see the module."""
    x = as_scores(id_scores, "id_scores")
    y = as_scores(ood_scores, "ood_scores")
    m, n = x.size, y.size
    pooled = rankdata(np.concatenate([x, y]), method="average")
    within_x, within_y = rankdata(x, method="average"), rankdata(y, method="average")
    id_part = (pooled[:m] - within_x) / n
    ood_part = 1.0 - (pooled[m:] - within_y) / m
    auroc = float((pooled[:m].sum() - m * (m + 1) / 2) / (m * n))
    return AurocComponents(auroc, id_part, ood_part)


def _z(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise InvalidInputError(f"level must be a fraction in (0, 1), e.g. 0.95; got {level!r}")
    return float(ndtri(0.5 + level / 2))


Term = tuple[float, AurocComponents, Hashable, Hashable]


def contrast_variance(terms: Sequence[Term]) -> float:
    """DeLong's variance of ``sum_k w_k A_k`` for terms ``(w_k, components_k, id_key, ood_key)``.

    Terms with the same ``id_key`` were scored on the same ID samples in the same order (paired);
    likewise ``ood_key``. Sets of samples are independent of each other. Returns NaN when a set
    has a single sample (its variance is undefined).
    """
    sets: dict[tuple[str, Hashable], Float] = {}
    for weight, comp, id_key, ood_key in terms:
        for side, key, part in (("id", id_key, comp.id_part), ("ood", ood_key, comp.ood_part)):
            total = sets.get((side, key))
            if total is not None and total.size != part.size:
                raise InvalidInputError(
                    f"paired {side} scores must be the same samples: got {total.size} and "
                    f"{part.size} {side.upper()} scores under one key; pass paired=False when "
                    "the samples differ"
                )
            sets[(side, key)] = weight * part if total is None else total + weight * part
    variance = 0.0
    for total in sets.values():
        if total.size < 2:
            return float("nan")
        variance += float(np.var(total, ddof=1)) / total.size
    return variance


def auroc_variance(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """DeLong's variance estimate of the AUROC of ``id_scores`` against ``ood_scores``."""
    return auroc_components(id_scores, ood_scores).variance()


INTERVAL_METHODS = ("wald", "logit")


def auroc_ci(
    id_scores: ArrayLike, ood_scores: ArrayLike, level: float = 0.95, *, method: str = "logit"
) -> Interval:
    """AUROC with an interval from DeLong's variance.

    ``method="logit"`` (default): the Wald interval of ``logit(A)`` with the delta-method
    standard error ``sqrt(var) / (A (1 - A))``, mapped back (Qin & Hotilovac, Statistical
    Methods in Medical Research 17, 2008). It stays inside (0, 1) and keeps its coverage near
    AUROC 1, where C-OOD's easy levels lie: over 1,000 binormal simulations at AUROC 0.99 with
    50 + 50 samples it covered 92.9 % against the plain interval's 81.5 %, and both were within
    a point of 95 % at AUROC 0.75 and 0.9 (``studies/results/ci_coverage.json``). At A = 0 or 1
    the logit is infinite and the plain interval (zero width) is returned.
    ``method="wald"``: ``A +- z sqrt(var)`` clipped to [0, 1], pROC's ``ci.auc(method =
    "delong")``.
    """
    if method not in INTERVAL_METHODS:
        raise InvalidInputError(f"method must be one of {INTERVAL_METHODS}; got {method!r}")
    z = _z(level)
    comp = auroc_components(id_scores, ood_scores)
    a, se = comp.auroc, float(np.sqrt(comp.variance()))
    if method == "logit" and 0.0 < a < 1.0:
        centre, half = np.log(a / (1 - a)), z * se / (a * (1 - a))
        low, high = (float(1 / (1 + np.exp(-v))) for v in (centre - half, centre + half))
        return Interval(a, low, high, level)
    return Interval(a, max(0.0, a - z * se), min(1.0, a + z * se), level)


def _comparison(difference: float, variance: float, level: float) -> Comparison:
    z_crit = _z(level)
    se = float(np.sqrt(variance)) if variance >= 0 else float("nan")
    if se > 0:
        z = difference / se
    else:  # zero variance: no evidence either way unless the estimates differ
        z = 0.0 if difference == 0 or np.isnan(se) else float(np.sign(difference) * np.inf)
    p = float(2 * ndtr(-abs(z))) if not np.isnan(se) else float("nan")
    return Comparison(difference, se, z, p, difference - z_crit * se, difference + z_crit * se,
                      level)


def delong_test(
    id_a: ArrayLike,
    ood_a: ArrayLike,
    id_b: ArrayLike,
    ood_b: ArrayLike,
    *,
    paired: bool = True,
    level: float = 0.95,
) -> Comparison:
    """DeLong's test of ``AUROC_a = AUROC_b``.

    ``paired=True``: ``a`` and ``b`` scored the same ID samples and the same OOD samples, in the
    same order (two detectors, or two models, on one benchmark); the covariance of the two
    AUROCs is then subtracted. ``paired=False``: independent samples (``var_a + var_b``).
    """
    a, b = auroc_components(id_a, ood_a), auroc_components(id_b, ood_b)
    keys = ("id", "ood") if paired else ("id_b", "ood_b")
    terms: list[Term] = [(1.0, a, "id", "ood"), (-1.0, b, *keys)]
    return _comparison(a.auroc - b.auroc, contrast_variance(terms), level)


def mean_auroc_test(
    a: tuple[ArrayLike, Mapping[str, ArrayLike]],
    b: tuple[ArrayLike, Mapping[str, ArrayLike]],
    *,
    paired_id: bool = True,
    paired_groups: bool = True,
    level: float = 0.95,
) -> Comparison:
    """Test of equal mean AUROC over OOD groups (a leaderboard value) for two score sets.

    ``a``, ``b``: ``(id_scores, {group: ood_scores})`` as kept in ``scores/<cell>.npz``; both
    need the same groups. ``paired_id``: the ID scores are of the same samples (one model with
    two detectors, or two models on one ID set). ``paired_groups``: each group holds the same
    OOD samples for both (standard benchmarks); C-OOD levels are built per (model, detector),
    so there ``paired_groups=False`` treats the OOD sides as independent, which ignores their
    positive covariance where the levels share images and so errs towards "not significant".
    """
    id_a, groups_a = a
    id_b, groups_b = b
    if set(groups_a) != set(groups_b):
        raise InvalidInputError(
            f"the two score sets have different OOD groups ({sorted(groups_a)} vs "
            f"{sorted(groups_b)}); compare cells of the same benchmark"
        )
    if not groups_a:
        raise InvalidInputError("mean_auroc_test needs at least one OOD group")
    weight = 1.0 / len(groups_a)
    terms: list[Term] = []
    difference = 0.0
    for group in groups_a:
        ca = auroc_components(id_a, groups_a[group])
        cb = auroc_components(id_b, groups_b[group])
        difference += weight * (ca.auroc - cb.auroc)
        terms.append((weight, ca, "id", ("ood", group)))
        terms.append((-weight, cb, "id" if paired_id else "id_b",
                      ("ood", group) if paired_groups else ("ood_b", group)))
    return _comparison(difference, contrast_variance(terms), level)
