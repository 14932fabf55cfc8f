"""VRA+ in App. A's parameterisation (arXiv 2602.05935) against a direct numpy re-statement:
thresholds at the ID quantiles eta_alpha and eta_alpha + 0.10 + u (0.89 - eta_alpha)."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


def _restated(acts, train, eta_alpha, u, gamma, per_unit):
    eta_beta = eta_alpha + 0.10 + u * ((0.99 - eta_alpha) - 0.10)
    f = train.features.astype(np.float64)
    axis = 0 if per_unit else None
    alpha, beta = np.percentile(f, 100 * eta_alpha, axis=axis), np.percentile(f, 100 * eta_beta, axis=axis)
    z = acts.features.astype(np.float64)
    shaped = np.where(z < alpha, 0.0, np.where(z > beta, beta * np.ones_like(z), z + gamma))
    return head_energy_reference(shaped, acts.head_weight, acts.head_bias)  # (expected, bound)


@pytest.mark.parametrize("per_unit", [False, True])
@pytest.mark.parametrize(("eta_alpha", "u", "gamma"), [(0.1, 0.0, 0.0), (0.45, 0.5, 2.5), (0.8, 1.0, 4.0)])
def test_matches_the_restated_function(id_train, id_test, ood_test, eta_alpha, u, gamma, per_unit):
    det = create("vra_plus", eta_alpha=eta_alpha, u=u, gamma=gamma, per_unit=per_unit).fit(id_train)
    for acts in (id_test, ood_test):
        expected, bound = _restated(acts, id_train, eta_alpha, u, gamma, per_unit)
        assert_within(det.score(acts), expected, bound)  # float32 head product


def test_is_vra_at_the_same_percentiles(id_train, id_test):
    det = create("vra_plus", eta_alpha=0.6, u=0.5, gamma=0.3).fit(id_train)
    vra = create("vra", lower_percentile=60.0, upper_percentile=100 * det.eta_beta, gamma=0.3,
                 per_unit=False).fit(id_train)
    # the same shaped features through the same head code in this process: equal up to the
    # percentiles' float64 rounding
    np.testing.assert_allclose(det.score(id_test), vra.score(id_test), rtol=1e-12)
    assert det.eta_beta == pytest.approx(0.6 + 0.10 + 0.5 * 0.29)


def test_errors():
    with pytest.raises(InvalidInputError, match=r"eta_alpha must be in \[0, 0.89\] \(a quantile"):
        create("vra_plus", eta_alpha=60)
    with pytest.raises(InvalidInputError, match=r"u must be in \[0, 1\]"):
        create("vra_plus", u=-0.1)
    with pytest.raises(InvalidInputError, match="gamma must be a finite number"):
        create("vra_plus", gamma=float("inf"))
