import numpy as np
import pytest
import torch

from oodbench.detectors import NotFittedError, create
from tests.detectors._reference import assert_rel, linear, pod, tensor


def _closed_form(train, acts, alpha: float) -> np.ndarray:
    mu = train.features.astype(np.float64).mean(axis=0)
    f = acts.features.astype(np.float64)
    w = acts.head_weight.astype(np.float64)[acts.logits.argmax(axis=1)]
    centred = f - mu
    p_score = (centred * w).sum(axis=1) / np.linalg.norm(centred, axis=1)
    return p_score + alpha * np.abs(f).sum(axis=1)


@pytest.mark.parametrize("alpha", [0.0, 1e-4, 0.01])
def test_matches_pytorch_ood_and_closed_form(id_train, id_test, ood_test, alpha):
    det = create("nci", alpha=alpha).fit(id_train)
    ref = pod().NCI(None, head=linear(id_train), alpha=alpha).fit_features(tensor(id_train.features))
    for acts in (id_test, ood_test):
        ours = det.score(acts)
        # pScore crosses zero: relative 1e-5 plus an absolute floor of 1e-6 * max|ref| (float32 there)
        assert_rel(ours, -ref.predict_features(tensor(acts.features, torch.float32)), rtol=1e-5, floor=1e-6)
        # float64 both: pScore, a 32-term dot product of size ~1 over a norm, rounds to ~1e-14
        # absolute (it crosses zero: atol), the L1 term to ~1e-14 relative
        np.testing.assert_allclose(ours, _closed_form(id_train, acts, alpha), rtol=1e-10, atol=1e-12)


def test_hand_computed(make_acts):
    train = make_acts(2, 2, 2)
    train.features[:] = [[1.0, 1.0], [3.0, 1.0]]  # mean (2, 1)
    train.head_weight[:] = [[2.0, 0.0], [0.0, 1.0]]
    train.head_bias[:] = 0.0
    acts = train.subset([0])
    acts.features = np.array([[5.0, 5.0]], dtype=np.float32)  # predicted class 0 (logits 10, 5)
    acts.logits = acts.features @ acts.head_weight.T
    # centred (3, 4): pScore = (2 * 3) / 5; L1 norm 10
    # small integers and one division by 5: a few ulps of float64 on any CPU
    np.testing.assert_allclose(create("nci", alpha=0.5).fit(train).score(acts), [6 / 5 + 5.0], rtol=1e-12)


def test_needs_fit(id_test):
    with pytest.raises(NotFittedError):
        create("nci").score(id_test)
