"""DeLong's AUROC variance, intervals and tests against the O(m n) definition and the bootstrap.

The kernel's values are 0, 1/2 and 1, so the components' and the AUROC's sums are exact in
float64 and each is one correctly rounded division: 1e-12 is far above any difference. The
variances, covariances and their square roots add float64 rounding of sums of at most a few
hundred terms (~1e-14 relative, ~1e-13 where two correlated detectors' variances cancel; in
any order, so also through BLAS in np.cov), inside rel=1e-10. The exact bootstrap enumerates
integer resample counts, whose products and sums with the kernel are exact in any order; only
the variance's pairwise sum over 65,536 values rounds (~1e-15 relative).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from oodbench.errors import InvalidInputError, NonFiniteError
from oodbench.metrics.bootstrap import bootstrap_replicates
from oodbench.metrics.delong import (
    auroc_ci,
    auroc_components,
    auroc_variance,
    contrast_variance,
    delong_test,
    mean_auroc_test,
)


def psi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The Mann-Whitney kernel over all pairs: 1 if x > y, 1/2 if equal, 0 otherwise."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def definition(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """DeLong et al. (1988): AUROC, V10 (row means of psi) and V01 (column means), O(m n)."""
    k = psi(x, y)
    return float(k.mean()), k.mean(axis=1), k.mean(axis=0)


def tied_scores(rng: np.random.Generator, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores on a coarse grid, so that ties within and across the two sets are common."""
    return np.round(rng.normal(0.8, 1, m), 1), np.round(rng.normal(0, 1, n), 1)


@pytest.mark.parametrize("m,n", [(1, 1), (2, 5), (37, 23), (400, 300)])
def test_components_equal_the_pairwise_definition(m: int, n: int) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    for x, y in (tied_scores(rng, m, n), (rng.normal(1, 1, m), rng.normal(0, 1, n))):
        comp = auroc_components(x, y)
        auroc, v10, v01 = definition(x, y)
        assert comp.auroc == pytest.approx(auroc, abs=1e-12)
        np.testing.assert_allclose(comp.id_part, v10, atol=1e-12)
        np.testing.assert_allclose(comp.ood_part, v01, atol=1e-12)
        labels = np.r_[np.ones(m), np.zeros(n)]
        if m and n:
            assert comp.auroc == pytest.approx(roc_auc_score(labels, np.r_[x, y]), abs=1e-12)


def test_variance_is_delongs_formula() -> None:
    rng = np.random.default_rng(1)
    x, y = tied_scores(rng, 60, 45)
    _, v10, v01 = definition(x, y)
    expected = v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size
    assert auroc_variance(x, y) == pytest.approx(expected, rel=1e-12)
    assert np.isnan(auroc_variance([1.0], [0.0, 0.5]))  # one ID sample: no variance estimate


def test_paired_test_uses_the_covariance_of_the_components() -> None:
    """Two detectors on the same samples: var(A1 - A2) = c' S10 c / m + c' S01 c / n, c = (1, -1),
    with S10, S01 the covariance matrices of the components (DeLong 1988, eq. 5)."""
    rng = np.random.default_rng(2)
    m, n = 80, 60
    x1, y1 = rng.normal(1.0, 1, m), rng.normal(0, 1, n)
    x2, y2 = x1 + rng.normal(0, 0.7, m), y1 + rng.normal(0, 0.7, n)  # correlated detector
    a1, v10_1, v01_1 = definition(x1, y1)
    a2, v10_2, v01_2 = definition(x2, y2)
    c = np.array([1.0, -1.0])
    s10, s01 = np.cov(np.vstack([v10_1, v10_2])), np.cov(np.vstack([v01_1, v01_2]))
    variance = c @ s10 @ c / m + c @ s01 @ c / n
    test = delong_test(x1, y1, x2, y2)
    assert test.difference == pytest.approx(a1 - a2, abs=1e-12)
    assert test.se == pytest.approx(np.sqrt(variance), rel=1e-10)
    z = (a1 - a2) / np.sqrt(variance)
    assert test.z == pytest.approx(z, rel=1e-10)
    assert test.p_value == pytest.approx(2 * norm.sf(abs(z)), rel=1e-9)
    assert test.low == pytest.approx(a1 - a2 - norm.ppf(0.975) * np.sqrt(variance), rel=1e-9)
    independent = delong_test(x1, y1, x2, y2, paired=False)
    var_sum = s10[0, 0] / m + s01[0, 0] / n + s10[1, 1] / m + s01[1, 1] / n
    assert independent.se == pytest.approx(np.sqrt(var_sum), rel=1e-10)
    assert test.se < independent.se  # positively correlated detectors: pairing helps


def test_exact_bootstrap_variance_decomposes_into_the_components() -> None:
    """Enumerate every stratified bootstrap resample of a tiny case (4^4 x 4^4): its exact
    variance is var0(V10)/m + var0(V01)/n + var0(r)/(m n) with r the Hoeffding remainder
    psi - V10 - V01 + A (population variances); DeLong's estimate is the first two terms
    with 1/(m-1), 1/(n-1)."""
    x = np.array([0.9, 0.3, 0.3, 1.4])
    y = np.array([0.3, -0.2, 0.5, 0.1])
    m, n = x.size, y.size
    k = psi(x, y)
    counts_x = np.array([np.bincount(t, minlength=m) for t in itertools.product(range(m), repeat=m)])
    counts_y = np.array([np.bincount(t, minlength=n) for t in itertools.product(range(n), repeat=n)])
    resampled = counts_x @ k @ counts_y.T / (m * n)  # the AUROC of every (ID, OOD) resample
    exact = resampled.var()
    comp = auroc_components(x, y)
    remainder = k - comp.id_part[:, None] - comp.ood_part[None, :] + comp.auroc
    decomposition = (comp.id_part.var() / m + comp.ood_part.var() / n
                     + remainder.var() / (m * n))
    assert exact == pytest.approx(decomposition, rel=1e-12)
    assert resampled.mean() == pytest.approx(comp.auroc, abs=1e-12)
    delong = comp.variance()
    assert delong == pytest.approx(comp.id_part.var(ddof=1) / m + comp.ood_part.var(ddof=1) / n)


def test_delong_variance_agrees_with_a_monte_carlo_bootstrap() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(1.2, 1, 500), rng.normal(0, 1.3, 400)
    boot = bootstrap_replicates(x, y, ["auroc"], n_boot=4000, seed=5)["auroc"]
    # a seeded Monte Carlo estimate: 4,000 replicates estimate a variance to ~2.2% (one
    # standard error), so 10% is 4.5 of them
    assert boot.var() == pytest.approx(auroc_variance(x, y), rel=0.1)


def test_intervals() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(1, 1, 200), rng.normal(0, 1, 150)
    iv = auroc_ci(x, y, method="wald")
    se = np.sqrt(auroc_variance(x, y))
    assert iv.estimate == pytest.approx(roc_auc_score(np.r_[np.ones(200), np.zeros(150)],
                                                      np.r_[x, y]))
    assert iv.low == pytest.approx(iv.estimate - norm.ppf(0.975) * se)
    assert iv.high == pytest.approx(iv.estimate + norm.ppf(0.975) * se)
    wide, narrow = auroc_ci(x, y, 0.99, method="wald"), auroc_ci(x, y, 0.8, method="wald")
    assert wide.low < iv.low < narrow.low < iv.estimate < narrow.high < iv.high < wide.high
    near_one = auroc_ci(x + 3.5, y, method="wald")  # the Wald interval is clipped to [0, 1]
    assert near_one.high == 1.0 and near_one.low < near_one.estimate
    separated = auroc_ci([2.0, 3.0], [0.0, 1.0])
    assert (separated.low, separated.estimate, separated.high) == (1.0, 1.0, 1.0)


def test_identical_inputs_are_not_different() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.normal(1, 1, 50), rng.normal(0, 1, 40)
    same = delong_test(x, y, x, y)
    assert same.difference == 0 and same.se == 0 and same.p_value == 1.0
    assert not same.significant()
    better = delong_test(x + 2, y, x, y)
    assert better.significant() and better.p_value < 1e-6 and better.difference > 0


def test_mean_over_groups() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(1, 1, 70)
    groups = {"a": rng.normal(0, 1, 30), "b": rng.normal(0.5, 1, 40)}
    other = (x + rng.normal(0, 0.5, 70), {g: v + rng.normal(0, 0.5, v.size) for g, v in groups.items()})
    one = mean_auroc_test((x, {"a": groups["a"]}), (other[0], {"a": other[1]["a"]}))
    pairwise = delong_test(x, groups["a"], other[0], other[1]["a"])
    assert one.difference == pytest.approx(pairwise.difference)
    assert one.se == pytest.approx(pairwise.se, rel=1e-12)
    both = mean_auroc_test((x, groups), other)
    # by hand: ID components of the four AUROCs add up per ID sample, OOD ones per group
    comps = {(s, g): definition(ids, oods[g]) for s, (ids, oods) in (("A", (x, groups)), ("B", other))
             for g in groups}
    id_total = sum(sign * comps[(s, g)][1] / 2 for s, sign in (("A", 1), ("B", -1)) for g in groups)
    variance = id_total.var(ddof=1) / x.size
    for g in groups:
        ood_total = (comps[("A", g)][2] - comps[("B", g)][2]) / 2
        variance += ood_total.var(ddof=1) / groups[g].size
    assert both.se == pytest.approx(np.sqrt(variance), rel=1e-10)
    expected = np.mean([comps[("A", g)][0] - comps[("B", g)][0] for g in groups])
    assert both.difference == pytest.approx(expected, abs=1e-12)
    unpaired = mean_auroc_test((x, groups), other, paired_groups=False)
    assert unpaired.difference == pytest.approx(both.difference) and unpaired.se != both.se


def test_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="same samples"):
        delong_test([1.0, 2.0], [0.0, 1.0], [1.0, 2.0, 3.0], [0.0, 1.0])
    with pytest.raises(InvalidInputError, match="level"):
        auroc_ci([1.0, 2.0], [0.0], level=95)
    with pytest.raises(NonFiniteError):
        auroc_components([1.0, np.nan], [0.0])
    with pytest.raises(InvalidInputError, match="different OOD groups"):
        mean_auroc_test(([1.0, 2.0], {"a": [0.0]}), ([1.0, 2.0], {"b": [0.0]}))
    with pytest.raises(InvalidInputError, match="paired"):
        contrast_variance([(1.0, auroc_components([1.0, 2.0], [0.0]), "id", "ood"),
                           (1.0, auroc_components([1.0], [0.0]), "id", "ood")])


def test_logit_interval() -> None:
    rng = np.random.default_rng(7)
    x, y = rng.normal(3, 1, 40), rng.normal(0, 1, 40)
    wald, logit = auroc_ci(x, y, method="wald"), auroc_ci(x, y)  # logit: the default
    a, se = wald.estimate, np.sqrt(auroc_variance(x, y))
    half = norm.ppf(0.975) * se / (a * (1 - a))
    expit = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    assert logit.estimate == a
    assert logit.low == pytest.approx(expit(np.log(a / (1 - a)) - half))
    assert logit.high == pytest.approx(expit(np.log(a / (1 - a)) + half))
    assert 0 < logit.low < a < logit.high < 1 and logit.high < wald.high
    separated = auroc_ci([2.0, 3.0], [0.0, 1.0], method="logit")  # A = 1: the Wald interval
    assert (separated.low, separated.high) == (1.0, 1.0)
    with pytest.raises(InvalidInputError, match="method"):
        auroc_ci(x, y, method="exact")
