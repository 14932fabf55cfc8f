import numpy as np
import pytest
import scipy.special
import torch

from oodbench.detectors import NotFittedError, create
from oodbench.errors import EmptyInputError
from tests.detectors._reference import assert_rel, pod, tensor


def _nll(logits: np.ndarray, labels: np.ndarray, t: float) -> float:
    log_p = scipy.special.log_softmax(logits.astype(np.float64) / t, axis=1)
    return float(-log_p[np.arange(len(labels)), labels].mean())


@pytest.fixture
def overconfident(make_acts):
    acts = make_acts(600, 10, 32, seed=3)
    acts.logits[:] = acts.logits * 4  # an over-confident model: the optimal T is > 1
    return acts


def test_fitted_temperature_minimises_nll(overconfident):
    det = create("temperature_scaling").fit(overconfident)
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
    t1 = create("temperature_scaling").fit(acts).temperature_
    acts.logits[:] = acts.logits * 4
    t4 = create("temperature_scaling").fit(acts).temperature_
    np.testing.assert_allclose(t4, 4 * t1, rtol=1e-7)


def test_scores_match_pytorch_ood_at_the_same_temperature(overconfident, id_test, ood_test):
    det = create("temperature_scaling").fit(overconfident)
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
        assert_rel(ours, -ref.predict_logits(tensor(acts.logits)), rtol=1e-5)
        expected = scipy.special.softmax(acts.logits.astype(np.float64) / det.temperature_, axis=1)
        np.testing.assert_allclose(ours, expected.max(axis=1), rtol=1e-7)  # float32 exps


def test_errors(make_acts, id_test):
    with pytest.raises(NotFittedError):
        create("temperature_scaling").score(id_test)
    unlabelled = make_acts(20, 10, 32, ood=True)
    with pytest.raises(EmptyInputError, match="label"):
        create("temperature_scaling").fit(unlabelled)
