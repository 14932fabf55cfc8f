"""plf_fold (oodbench's three-parameter special case of PLF) against an independent element-by-
element numpy statement of its piecewise function, and its two special cases (VRA with gamma = 0,
ReAct)."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.detectors import NotFittedError, create
from oodbench.errors import InvalidInputError, MissingActivationError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


def _numpy_plf(z, t1, t2, slope):
    out = np.empty_like(z)
    for idx, v in np.ndenumerate(z):
        a = t1 if np.ndim(t1) == 0 else t1[idx[1]]
        b = t2 if np.ndim(t2) == 0 else t2[idx[1]]
        if v < a:
            out[idx] = 0.0
        elif v <= b:
            out[idx] = v
        else:
            out[idx] = max(b - slope * (v - b), 0.0)
    return out


def _energy(shaped, acts):
    """(expected, bound) of the float32 head energy of ``shaped`` (oodbench.compute)."""
    return head_energy_reference(shaped, acts.head_weight, acts.head_bias)


@pytest.mark.parametrize("per_unit", [True, False])
@pytest.mark.parametrize("slope", [0.0, 0.5, 3.0])
def test_matches_numpy(id_train, id_test, ood_test, per_unit, slope):
    det = create("plf_fold", lower_percentile=40, upper_percentile=85, slope=slope, per_unit=per_unit)
    det.fit(id_train)
    train = id_train.features.astype(np.float64)
    axis = 0 if per_unit else None
    t1, t2 = np.percentile(train, 40, axis=axis), np.percentile(train, 85, axis=axis)
    for acts in (id_test, ood_test):
        z = acts.features.astype(np.float64)
        shaped = _numpy_plf(z, t1, t2, slope)
        if slope > 0:  # the fold really happens on these data: some entries are lowered, some zeroed
            above = z > (t2 if np.ndim(t2) == 0 else t2[None, :])
            assert above.any() and (shaped[above] < z[above]).all()
        assert_within(det.score(acts), *_energy(shaped, acts))


def test_special_cases(id_train, id_test):
    """slope 0 is VRA (gamma 0); no lower threshold, one global knee and slope 0 is ReAct."""
    vra = create("vra", lower_percentile=55, upper_percentile=92, gamma=0.0).fit(id_train)
    plf = create("plf_fold", lower_percentile=55, upper_percentile=92, slope=0.0).fit(id_train)
    # the same thresholds and head code in this process: equal up to float64 rounding of
    # the thresholds (what another CPU changes, it changes in both)
    np.testing.assert_allclose(plf.score(id_test), vra.score(id_test), rtol=1e-12)
    react = create("react", percentile=88).fit(id_train)
    plf = create("plf_fold", lower_percentile=0, upper_percentile=88, slope=0.0, per_unit=False)
    np.testing.assert_allclose(plf.fit(id_train).score(id_test), react.score(id_test), rtol=1e-12)


def test_fold_separates_over_activated_ood(id_train, id_test, ood_test):
    """OOD rows with a few abnormally large activations: folding them down lowers their score
    more than clipping does (the reason for the fold)."""
    from oodbench.metrics import auroc

    ood = ood_test.subset(np.arange(len(ood_test)))
    ood.features = ood.features.copy()
    ood.features[:, :4] += 6.0
    clip = create("plf_fold", slope=0.0).fit(id_train)
    fold = create("plf_fold", slope=2.0).fit(id_train)
    assert auroc(fold.score(id_test), fold.score(ood)) > auroc(clip.score(id_test), clip.score(ood))


def test_shape_is_the_scored_function(id_train, id_test):
    import torch

    det = create("plf_fold").fit(id_train)
    shaped = det.shape(torch.as_tensor(id_test.features, dtype=torch.float64)).numpy()
    assert_within(det.score(id_test), *_energy(shaped, id_test))


def test_errors(id_train, make_acts):
    with pytest.raises(InvalidInputError, match="lower_percentile <= upper_percentile"):
        create("plf_fold", lower_percentile=95, upper_percentile=90)
    with pytest.raises(InvalidInputError, match="'plf_fold': slope must be >= 0"):
        create("plf_fold", slope=-1.0)
    with pytest.raises(InvalidInputError, match="upper_percentile"):
        create("plf_fold", upper_percentile=101)
    with pytest.raises(NotFittedError):
        create("plf_fold").score(id_train)
    with pytest.raises(InvalidInputError, match="ID training activations"):
        create("plf_fold").fit(None)
    with pytest.raises(MissingActivationError, match="head_weight"):
        create("plf_fold").fit(id_train).score(make_acts(5, 10, 32, seed=3, with_head=False))
