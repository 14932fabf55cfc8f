import numpy as np
import pytest
import scipy.special

from oodbench.detectors import NotFittedError, create
from oodbench.errors import InvalidInputError
from tests.detectors._reference import assert_rel, pod, tensor


def _closed_form(train_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    p_train = scipy.special.softmax(train_logits.astype(np.float64), axis=1)
    pred = p_train.argmax(axis=1)
    templates = [p_train[pred == k].mean(axis=0) for k in np.unique(pred)]
    p = scipy.special.softmax(logits.astype(np.float64), axis=1)
    kl = np.array([[scipy.special.rel_entr(row, d).sum() for d in templates] for row in p])
    return -kl.min(axis=1)


def test_matches_pytorch_ood(id_train, id_test, ood_test):
    det = create("klm").fit(id_val=id_train)
    ref = pod().KLMatching(None).fit_logits(tensor(id_train.logits), tensor(id_train.labels, None))
    for acts in (id_test, ood_test):
        assert_rel(det.score(acts), -ref.predict_logits(tensor(acts.logits)), rtol=1e-5)


def test_closed_form(id_train, id_test, ood_test):
    det = create("klm").fit(id_val=id_train)
    for acts in (id_test, ood_test):
        np.testing.assert_allclose(det.score(acts), _closed_form(id_train.logits, acts.logits), rtol=1e-9)


def test_only_predicted_classes_have_templates(make_acts, id_test):
    train = make_acts(200, 10, 32, seed=5)
    train.logits[:, 3] = -50.0  # class 3 is never predicted
    with pytest.warns(UserWarning, match="1 of 10 classes are never predicted"):
        det = create("klm").fit(id_val=train)
    assert 3 not in det.template_classes_
    assert len(det.template_classes_) == len(np.unique(train.predictions))
    np.testing.assert_allclose(det.score(id_test), _closed_form(train.logits, id_test.logits), rtol=1e-9)


def test_kl_to_own_template_is_zero(make_acts):
    """A sample whose softmax equals its class template has KL 0: kappa = 0, the maximum."""
    train = make_acts(1, 4, 3)
    with pytest.warns(UserWarning, match="3 of 4 classes"):
        det = create("klm").fit(id_val=train)
    np.testing.assert_allclose(det.score(train), [0.0], atol=1e-12)


def test_needs_fit(id_test):
    with pytest.raises(NotFittedError):
        create("klm").score(id_test)


def test_fits_on_id_val_by_default(id_train, id_test):
    """The paper's (and OpenOOD's) protocol: templates from held-out ID data; the training set
    only when asked for."""
    assert create("klm").fit_data == "id_val"
    with pytest.raises(InvalidInputError, match="held-out ID validation activations"):
        create("klm").fit(id_train)
    on_train = create("klm", fit_data="train").fit(id_train, id_val=None)
    np.testing.assert_array_equal(on_train.score(id_test), create("klm").fit(None, id_val=id_train).score(id_test))
