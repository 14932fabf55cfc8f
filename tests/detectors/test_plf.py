"""oodbench's reading of PLF (the seven parameters of arXiv 2602.05935, App. A, joined as
plf.py's docstring states; PLF's own source, arXiv 2506.14194, could not be read) against a
direct element-by-element re-statement of that reading in plain Python, the quantile-and-u
parameterisation, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench.detectors import NotFittedError, create
from oodbench.detectors.plf import three_segments
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


def _restated_f(a, x1, x2, y_start, y_end, delta_y, m1, m2):
    """oodbench's reading of App. A's f (plf.py's docstring) at one value a = |z|, written out."""
    y1 = y_end + delta_y
    if a < x1:
        return y_start + m1 * a
    if a <= x2:
        return y1 if x2 == x1 else y1 + (y_end - y1) * (a - x1) / (x2 - x1)
    return y_end + m2 * (a - x2)


def _restated_scores(acts, train, params, per_unit):
    q1, u = params["q1"], params["u"]
    q2 = q1 + 0.10 + u * ((0.99 - q1) - 0.10)  # delta = delta_min + u (delta_max - delta_min)
    absolute = np.abs(train.features.astype(np.float64))
    axis = 0 if per_unit else None
    x1, x2 = np.percentile(absolute, 100 * q1, axis=axis), np.percentile(absolute, 100 * q2, axis=axis)
    z = acts.features.astype(np.float64)
    shaped = np.empty_like(z)
    for (i, j), v in np.ndenumerate(z):
        lo, hi = (x1[j], x2[j]) if per_unit else (x1, x2)
        shaped[i, j] = _restated_f(abs(v), lo, hi, params["y_start"], params["y_end"],
                                   params["delta_y"], params["m1"], params["m2"])
    return head_energy_reference(shaped, acts.head_weight, acts.head_bias)  # (expected, bound)


POINTS = [
    {"y_start": -1.0, "y_end": 1.5, "delta_y": 0.7, "q1": 0.55, "u": 0.4, "m1": 2.0, "m2": -0.5},
    {"y_start": 0.0, "y_end": 0.2, "delta_y": 3.0, "q1": 0.75, "u": 1.0, "m1": 0.0, "m2": 1.5},
    {"y_start": -4.0, "y_end": 5.0, "delta_y": 0.0, "q1": 0.1, "u": 0.0, "m1": 5.0, "m2": -5.0},
]


@pytest.mark.parametrize("per_unit", [False, True])
@pytest.mark.parametrize("point", range(len(POINTS)))
def test_matches_the_restated_function(id_train, id_test, ood_test, point, per_unit):
    params = POINTS[point]
    det = create("plf", per_unit=per_unit, **params).fit(id_train)
    for acts in (id_test, ood_test):
        expected, bound = _restated_scores(acts, id_train, params, per_unit)
        assert_within(det.score(acts), expected, bound)  # float32 head product (oodbench.compute)


def test_signed_features_use_absolute_quantiles_and_values(make_acts):
    """Features with negative entries: breakpoints are quantiles of |z| and f reads |z|."""
    train, test = make_acts(300, 6, 24, seed=11), make_acts(40, 6, 24, seed=12)
    for acts in (train, test):
        acts.features = acts.features - 0.7  # a signed copy
    params = POINTS[0]
    det = create("plf", **params).fit(train)
    assert (train.features < 0).any()
    assert_within(det.score(test), *_restated_scores(test, train, params, False))  # float32 head
    assert det.x1_ == pytest.approx(np.percentile(np.abs(train.features.astype(np.float64)), 100 * det.q1))


def test_every_segment_is_exercised(id_train, id_test):
    """The test data fall on all three segments (so the comparison above checks each one)."""
    det = create("plf", **POINTS[0]).fit(id_train)
    a = np.abs(id_test.features)
    assert (a < det.x1_).any() and ((a >= det.x1_) & (a <= det.x2_)).any() and (a > det.x2_).any()


def test_quantile_parameterisation():
    det = create("plf", q1=0.2, u=0.5)
    assert det.q2 == pytest.approx(0.2 + 0.10 + 0.5 * (0.99 - 0.2 - 0.10))
    assert create("plf", q1=0.8, u=1.0).q2 == pytest.approx(0.99)  # the ceiling
    assert create("plf", q1=0.8, u=0.0).q2 == pytest.approx(0.9)  # delta_min above q1
    assert create("plf", y_end=1.0, delta_y=0.5).y1 == 1.5


def test_tied_breakpoints_give_the_middle_value():
    a = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    out = three_segments(a, 0.0, 0.0, -1.0, 2.0, 3.0, 0.5, 1.0)
    assert out.tolist() == [[3.0, 3.0, 1.5]]  # a == x1 == x2: y1; above: y_end + m2 (a - x2)


def test_fold_is_the_three_segments_on_z(id_train, id_test):
    """plf_fold is the same three-segment function (y_start = m1 = 0, y1 = t1, y_end = t2,
    m2 = -slope) on z, its last segment floored at 0."""
    fold = create("plf_fold", lower_percentile=40, upper_percentile=85, slope=1.5).fit(id_train)
    z = torch.as_tensor(id_test.features, dtype=torch.float64)
    t1, t2 = fold.lower_, fold.knee_
    general = three_segments(z, t1, t2, 0.0, 0.0, t1, t2, -1.5)
    expected = torch.where(z > t2, general.clamp(min=0.0), general)
    # two float64 arrangements of one piecewise-linear function of values ~1: a few ulps
    torch.testing.assert_close(fold.shape(z), expected, rtol=1e-12, atol=1e-12)


def test_errors(id_train):
    with pytest.raises(InvalidInputError, match=r"q1 must be in \[0, 0.89\] \(a quantile"):
        create("plf", q1=0.95)
    with pytest.raises(InvalidInputError, match=r"q1 must be in \[0, 0.89\]"):
        create("plf", q1=45)  # percent instead of a fraction
    with pytest.raises(InvalidInputError, match=r"u must be in \[0, 1\]"):
        create("plf", u=1.2)
    with pytest.raises(InvalidInputError, match="m2 must be a finite number"):
        create("plf", m2=float("nan"))
    with pytest.raises(NotFittedError):
        create("plf").score(id_train)
