import numpy as np
import pytest
import scipy.optimize
import scipy.special
import torch

from oodbench.detectors import NotFittedError, create
from oodbench.errors import EmptyInputError, InvalidInputError, UndeterminedStatisticError
from tests._tolerance import assert_within
from tests.detectors._reference import msp_error, pod, tensor


def _nll(logits: np.ndarray, labels: np.ndarray, t: float) -> float:
    log_p = scipy.special.log_softmax(logits.astype(np.float64) / t, axis=1)
    return float(-log_p[np.arange(len(labels)), labels].mean())


@pytest.fixture
def overconfident(make_acts):
    acts = make_acts(600, 10, 32, seed=3)
    acts.logits[:] = acts.logits * 4  # an over-confident model: the optimal T is > 1
    return acts


def test_fitted_temperature_minimises_nll(overconfident):
    det = create("temperature_scaling").fit(id_val=overconfident)
    t = det.temperature_
    logits, labels = overconfident.logits, overconfident.labels
    h = 1e-4 * t
    slope = (_nll(logits, labels, t + h) - _nll(logits, labels, t - h)) / (2 * h)
    assert abs(slope) < 1e-6
    for factor in (0.9, 0.99, 1.01, 1.1):
        assert _nll(logits, labels, t) <= _nll(logits, labels, t * factor)


def test_temperature_scales_with_the_logits(make_acts):
    """NLL(s z / T) depends on s / T only, so the optimum for s * logits is s * T."""
    acts = make_acts(600, 10, 32, seed=3)
    t1 = create("temperature_scaling").fit(id_val=acts).temperature_
    acts.logits[:] = acts.logits * 4
    t4 = create("temperature_scaling").fit(id_val=acts).temperature_
    # both fits stop at |grad| <= 1e-10 mean |z| or a 1e-12 Newton step (4 z is exact in
    # float32): T to ~1e-10 relative on any CPU, 1000 times inside 1e-7
    np.testing.assert_allclose(t4, 4 * t1, rtol=1e-7)


def test_scores_match_pytorch_ood_at_the_same_temperature(overconfident, id_test, ood_test):
    det = create("temperature_scaling").fit(id_val=overconfident)
    ref = pod().TemperatureScaling(None).fit_logits(
        tensor(overconfident.logits, torch.float32), tensor(overconfident.labels, torch.int64)
    )
    t_ref = float(ref.t.detach())
    # pytorch-ood's 50 L-BFGS steps only approximate the optimum: ours is at least as good
    assert _nll(overconfident.logits, overconfident.labels, det.temperature_) <= _nll(
        overconfident.logits, overconfident.labels, t_ref
    ) + 1e-12
    with torch.no_grad():
        ref.t.fill_(det.temperature_)
    for acts in (id_test, ood_test):
        ours = det.score(acts)
        # float32 exps of z / T (oodbench.compute): up to ~2e-7 relative here, against the
        # float64 scores of pytorch-ood and scipy
        bound = msp_error(acts.logits, det.temperature_)
        assert_within(ours, -ref.predict_logits(tensor(acts.logits)).detach().numpy(), bound)
        expected = scipy.special.softmax(acts.logits.astype(np.float64) / det.temperature_, axis=1)
        assert_within(ours, expected.max(axis=1), bound)


def test_errors(make_acts, id_test):
    with pytest.raises(NotFittedError):
        create("temperature_scaling").score(id_test)
    unlabelled = make_acts(20, 10, 32, ood=True)
    with pytest.raises(EmptyInputError, match="label"):
        create("temperature_scaling").fit(id_val=unlabelled)


def _scipy_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """scipy's minimiser of the NLL over log T (an independent reference)."""
    res = scipy.optimize.minimize_scalar(lambda log_t: _nll(logits, labels, float(np.exp(log_t))),
                                         bounds=(-8.0, 8.0), method="bounded",
                                         options={"xatol": 1e-10})
    assert res.success
    return float(np.exp(res.x))


def test_equals_scipys_nll_minimiser(overconfident):
    t = create("temperature_scaling").fit(id_val=overconfident).temperature_
    t_ref = _scipy_temperature(overconfident.logits, overconfident.labels)
    # Brent's bounded search (xatol 1e-10 in log T) on an NLL that rounds at ~1e-15: the
    # minimiser is found to ~1e-8 relative (sqrt of the NLL's rounding over its curvature)
    np.testing.assert_allclose(t, t_ref, rtol=1e-6)
    assert _nll(overconfident.logits, overconfident.labels, t) <= _nll(
        overconfident.logits, overconfident.labels, t_ref) + 1e-12


def test_perfectly_classified_data_cannot_determine_t(make_acts):
    """All fit samples right: the NLL decreases all the way to T -> 0 (no finite minimiser)."""
    acts = make_acts(200, 10, 32, seed=4)
    acts.labels[:] = acts.predictions
    logits, labels = acts.logits, acts.labels
    assert _nll(logits, labels, 0.01) < _nll(logits, labels, 0.1) < _nll(logits, labels, 1.0)
    with pytest.raises(UndeterminedStatisticError, match="classifies all 200 fit samples correctly"):
        create("temperature_scaling").fit(id_val=acts)
    # labels the logits rank below average: the NLL decreases as T -> infinity
    acts.labels[:] = np.asarray(acts.logits).argmin(axis=1)
    with pytest.raises(UndeterminedStatisticError, match="T -> infinity"):
        create("temperature_scaling").fit(id_val=acts)


def test_fits_on_id_val_by_default(overconfident):
    assert create("temperature_scaling").fit_data == "id_val"
    with pytest.raises(InvalidInputError, match="held-out ID validation activations"):
        create("temperature_scaling").fit(overconfident)
    on_train = create("temperature_scaling", fit_data="train").fit(overconfident)
    assert on_train.temperature_ == create("temperature_scaling").fit(id_val=overconfident).temperature_


@pytest.mark.heavy
def test_real_model_id_val_matches_scipy_and_its_training_half_is_undetermined(lite0_imagenet_val):
    """EfficientNet-Lite0 (real weights) on real ImageNet images: T fitted on an ID-val half is
    scipy's NLL minimum; a subset it classifies perfectly raises with the cause."""
    _, _, acts = lite0_imagenet_val
    rows = np.random.default_rng(0).permutation(len(acts))
    id_val = acts.subset(np.sort(rows[: len(acts) // 2]))
    det = create("temperature_scaling").fit(id_val=id_val)
    t_ref = _scipy_temperature(np.asarray(id_val.logits), np.asarray(id_val.labels))
    np.testing.assert_allclose(det.temperature_, t_ref, rtol=1e-6)
    assert 0.5 < det.temperature_ < 2.0  # a calibrated ImageNet model: T near 1
    correct = acts.subset(np.flatnonzero(acts.correct)[:300])
    with pytest.raises(UndeterminedStatisticError, match="correctly"):
        create("temperature_scaling").fit(id_val=correct)
