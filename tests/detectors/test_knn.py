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
    with pytest.warns(LargeKWarning, match=r"k=50 is 7\.7% of its 650-row bank.*gives k=1 for"):
        create("knn", k=50).fit(bank)
    with pytest.warns(LargeKWarning, match="k=50 is"):
        create("nnguide", k=50).fit(bank)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create("knn", k=6).fit(bank)  # 0.9 % of the bank
        create("knn", k=50).fit(make_acts(5000, 10, 16))  # 1 %


def test_the_large_k_warning_says_which_k_the_papers_share_gives_and_why():
    """Issue 33 item 1: the text names the share, the papers' k for this bank and how it follows
    from the bank size (0.1 % of it, rounded, at least 1), and the bank size where k would fit."""
    from oodbench.detectors._stats import PAPER_K_SHARE, large_k_message, paper_k

    assert PAPER_K_SHARE == 0.001  # the numbers below: 0.1 % of 24 and of 5,000 rows
    small = large_k_message("knn", 3, 24)
    assert small is not None
    assert small.startswith("knn: k=3 is 12.5% of its 24-row bank, more than 10 times the papers' share.")
    assert ("0.1% of 24 rows is 0.024, so the papers' share gives k=1 for this bank (the smallest k): "
            "lower k to 1, or fit on more training images (k=3 is the papers' share of a 3,000-row bank)"
            ) in small
    large = large_k_message("knn", 60, 5000)
    assert large is not None
    assert "0.1% of 5,000 rows is 5, so the papers' share gives k=5 for this bank: lower k to 5" in large
    assert "smallest" not in large
    assert paper_k(24) == 1 and paper_k(5000) == 5 and paper_k(1_281_167) == 1281


@pytest.mark.parametrize("rows", [24, 60, 99])
def test_no_large_k_warning_when_k_is_the_papers_k_for_the_bank(make_acts, rows):
    """Issue 33 item 1: k=1 of a 24-row bank is 4.2 % of it, but also the k the papers' share
    gives there: the warning told to use k=1 while k was 1. KNN and NNGuide fit without it."""
    import warnings

    from oodbench.detectors._stats import LARGE_K_SHARE, large_k_message, paper_k

    k = paper_k(rows)
    assert k > LARGE_K_SHARE * rows  # over the share that warns, so only the papers' k spares it
    assert large_k_message("knn", k, rows) is None
    bank = make_acts(rows, 10, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create("knn", k=k).fit(bank)
        create("nnguide", k=k).fit(bank)
