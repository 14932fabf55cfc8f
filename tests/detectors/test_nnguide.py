import numpy as np
import pytest
import scipy.special
import torch

from oodbench.detectors import NotFittedError, create
from oodbench.errors import InvalidInputError
from tests.detectors._reference import assert_rel, linear, pod, tensor


def _closed_form(train, acts, k: int) -> np.ndarray:
    def unit(f):
        f = f.astype(np.float64)
        return f / np.linalg.norm(f, axis=1, keepdims=True)

    bank = unit(train.features) * scipy.special.logsumexp(train.logits.astype(np.float64), axis=1)[:, None]
    sims = unit(acts.features) @ bank.T
    guidance = -np.sort(-sims, axis=1)[:, :k].mean(axis=1)
    return guidance * scipy.special.logsumexp(acts.logits.astype(np.float64), axis=1)


@pytest.mark.parametrize("k", [1, 10])
def test_matches_pytorch_ood_and_closed_form(id_train, id_test, ood_test, k):
    det = create("nnguide", k=k).fit(id_train)
    ref = pod().NNGuide(None, head=linear(id_train), k=k)
    ref.fit_features(tensor(id_train.features), tensor(id_train.labels, None))
    for acts in (id_test, ood_test):
        ours = det.score(acts)
        # float32 similarities of unit vectors (faiss, and pytorch-ood's float32): ~1e-7
        # relative on scores of 7 to 62 (never near 0)
        assert_rel(ours, -ref.predict_features(tensor(acts.features, torch.float32)), rtol=1e-5)
        np.testing.assert_allclose(ours, _closed_form(id_train, acts, k), rtol=1e-5)


def test_fit_fraction(id_train, id_test):
    det = create("nnguide", k=5, fit_fraction=0.1, seed=2).fit(id_train)
    rows = np.sort(np.random.default_rng(2).choice(len(id_train), size=40, replace=False))
    np.testing.assert_allclose(det.score(id_test), _closed_form(id_train.subset(rows), id_test, 5), rtol=1e-5)  # as above


def test_errors(make_acts, id_test):
    with pytest.raises(NotFittedError):
        create("nnguide").score(id_test)
    with pytest.raises(InvalidInputError, match="k=10"):
        create("nnguide").fit(make_acts(5, 10, 32))
