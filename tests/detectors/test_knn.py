import numpy as np
import pytest

from oodbench.detectors import NotFittedError, create
from oodbench.errors import InvalidInputError
from tests.detectors._reference import assert_rel, pod, tensor


def _brute_force(bank: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    b = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    d = np.sqrt(((q[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))
    return -np.sort(d, axis=1)[:, k - 1]


@pytest.mark.parametrize("k", [1, 5, 50])
def test_matches_pytorch_ood_and_brute_force(id_train, id_test, ood_test, k):
    det = create("knn", k=k).fit(id_train)
    ref = pod().KNN(None, k=k).fit_features(tensor(id_train.features), tensor(id_train.labels, None))
    for acts in (id_test, ood_test):
        ours = det.score(acts)
        # float32 unit vectors (faiss): squared distances within ~1e-6 absolute, so distances
        # of >= 0.28 (the nearest here) within ~2e-6 relative
        assert_rel(ours, -ref.predict_features(tensor(acts.features)), rtol=1e-5)
        f64 = (id_train.features.astype(np.float64), acts.features.astype(np.float64))
        np.testing.assert_allclose(ours, _brute_force(*f64, k), rtol=1e-5)


def test_invariant_to_feature_scaling(id_train, id_test):
    rng = np.random.default_rng(0)

    def rescaled(acts):
        out = acts.subset(np.arange(len(acts)))
        out.features = acts.features * rng.uniform(0.01, 100, size=(len(acts), 1)).astype(np.float32)
        return out

    base = create("knn", k=7).fit(id_train).score(id_test)
    # the rescaled features round to float32 (6e-8 relative): distances as above
    np.testing.assert_allclose(create("knn", k=7).fit(rescaled(id_train)).score(rescaled(id_test)), base, rtol=1e-5)


def test_fit_fraction_subsamples_the_bank(id_train, id_test):
    det = create("knn", k=3, fit_fraction=0.25, seed=4).fit(id_train)
    assert det.index_.size == 100
    rows = np.sort(np.random.default_rng(4).choice(len(id_train), size=100, replace=False))
    expected = _brute_force(id_train.features[rows].astype(np.float64), id_test.features.astype(np.float64), 3)
    np.testing.assert_allclose(det.score(id_test), expected, rtol=1e-5)  # as above


def test_errors(make_acts, id_test):
    with pytest.raises(NotFittedError):
        create("knn").score(id_test)
    with pytest.raises(InvalidInputError, match="k=50"):
        create("knn", k=50).fit(make_acts(30, 10, 32))
    with pytest.raises(InvalidInputError, match="fit_fraction"):
        create("knn", fit_fraction=1.5).fit(make_acts(30, 10, 32))


def test_a_k_that_is_large_for_the_bank_is_warned_about(make_acts):
    import warnings

    from oodbench.detectors._stats import LargeKWarning

    bank = make_acts(650, 10, 16)
    with pytest.warns(LargeKWarning, match=r"k=50 is 7\.7% of its 650-row bank.*gives k=1;"):
        create("knn", k=50).fit(bank)
    with pytest.warns(LargeKWarning, match="k=50 is"):
        create("nnguide", k=50).fit(bank)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create("knn", k=6).fit(bank)  # 0.9 % of the bank
        create("knn", k=50).fit(make_acts(5000, 10, 16))  # 1 %
