import numpy as np
import pytest

from oodbench.detectors import NotFittedError, create
from tests.detectors._reference import assert_rel, linear, pod, tensor


def _closed_form(train, acts) -> np.ndarray:
    f, y = train.features.astype(np.float64), train.labels
    correct = train.logits.argmax(axis=1) == y
    patterns = np.stack([f[correct & (y == c)].mean(axis=0) for c in range(train.num_classes)])
    pred = acts.logits.argmax(axis=1)
    return (acts.features.astype(np.float64) * patterns[pred]).sum(axis=1)


def test_matches_pytorch_ood_and_closed_form(id_train, id_test, ood_test):
    det = create("she").fit(id_train)
    ref = pod().SHE(None, head=linear(id_train, dtype=tensor(id_train.features).dtype))
    ref.fit_features(tensor(id_train.features), tensor(id_train.labels, None))
    for acts in (id_test, ood_test):
        ours = det.score(acts)
        assert_rel(ours, -ref.predict_features(tensor(acts.features)), rtol=1e-5)  # float64 both
        # float64 sums of non-negative terms (post-ReLU features, their class means): within
        # gamma(432) ~ 5e-14 relative of each other, however the sums are ordered
        np.testing.assert_allclose(ours, _closed_form(id_train, acts), rtol=1e-10)


def test_class_without_correct_sample_has_zero_pattern(id_train, id_test):
    train = id_train.subset(np.arange(len(id_train)))
    wrong = (train.labels == 2) & train.correct
    train.labels = np.where(wrong, 3, train.labels)  # class 2 is never correctly classified now
    with pytest.warns(UserWarning, match="1 of 10 classes"):
        det = create("she").fit(train)
    assert det.missing_classes_.tolist() == [2]
    scores = det.score(id_test)
    assert np.all(scores[id_test.predictions == 2] == 0.0)
    assert np.all(scores[id_test.predictions != 2] > 0.0)


def test_needs_fit(id_test):
    with pytest.raises(NotFittedError):
        create("she").score(id_test)
