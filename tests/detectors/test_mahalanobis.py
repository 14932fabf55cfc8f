import numpy as np
import pytest
import scipy.linalg
from sklearn.covariance import EmpiricalCovariance

from oodbench.detectors import NotFittedError, create
from oodbench.errors import EmptyInputError, MissingActivationError
from tests._tolerance import assert_within, scatter_error
from tests.detectors._reference import assert_rel, float64_default, pod, tensor


def _closed_form(train, acts):
    f, y = train.features.astype(np.float64), train.labels
    classes = np.unique(y)
    means = np.stack([f[y == c].mean(axis=0) for c in classes])
    precision = EmpiricalCovariance(assume_centered=True).fit(f - means[np.searchsorted(classes, y)]).precision_
    x = acts.features.astype(np.float64)
    d = np.stack([np.einsum("nd,de,ne->n", x - m, precision, x - m) for m in means], axis=1)
    return -d.min(axis=1)


def test_fit_statistics_match_sklearn(id_train):
    det = create("mahalanobis").fit(id_train)
    f, y = id_train.features.astype(np.float64), id_train.labels
    means = np.stack([f[y == c].mean(axis=0) for c in range(10)])
    # float64 means of ~40 rows of O(1) features: within ~40 ulps, far inside 1e-12
    np.testing.assert_allclose(det.means_.numpy(), means, rtol=1e-12, atol=1e-12)
    centred = f - means[y]
    ec = EmpiricalCovariance(assume_centered=True).fit(centred)  # divides by N
    # entries down to 7e-6 from sums of 400 products of size ~0.1: the rounding bound of the
    # scatter sums (and of the centring), not a relative tolerance
    assert_within(det.covariance_.numpy(), ec.covariance_, scatter_error(centred) / len(f))
    w = det.whitener_.numpy()
    # an inverse of a covariance of condition number ~3 (eigh against sklearn's pinvh): errors
    # of ~1e-14 relative, far inside 1e-8
    np.testing.assert_allclose(w @ w.T, ec.precision_, rtol=1e-8, atol=1e-10 * np.abs(ec.precision_).max())


def test_closed_form(id_train, id_test, ood_test):
    det = create("mahalanobis").fit(id_train)
    for acts in (id_test, ood_test):
        # squared distances of ~32 (never near 0) through a covariance of condition number ~3:
        # float64 rounding of ~1e-14 relative, far inside 1e-9
        np.testing.assert_allclose(det.score(acts), _closed_form(id_train, acts), rtol=1e-9)


def test_matches_pytorch_ood_up_to_2n(id_train, id_test, ood_test):
    """pytorch-ood keeps the scatter matrix N * Sigma and halves the distance: kappa = -2N * pt."""
    det = create("mahalanobis").fit(id_train)
    with float64_default():
        ref = pod().Mahalanobis(None).fit_features(tensor(id_train.features), tensor(id_train.labels, None))
        for acts in (id_test, ood_test):
            pt = ref.predict_features(tensor(acts.features))
            assert_rel(det.score(acts), -2 * len(id_train) * pt, rtol=1e-5)  # float64 both


def test_invariant_to_invertible_affine_maps(id_train, id_test):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(32, 32)) + 4 * np.eye(32)
    c = rng.normal(size=32)

    def mapped(acts):
        out = acts.subset(np.arange(len(acts)))
        out.features = acts.features.astype(np.float64) @ a.T + c
        return out

    det, det_mapped = create("mahalanobis").fit(id_train), create("mahalanobis").fit(mapped(id_train))
    # exact in real arithmetic; float64 rounding through A (condition number ~100) and the
    # covariance: ~1e-12 relative, far inside 1e-7
    np.testing.assert_allclose(det_mapped.score(mapped(id_test)), det.score(id_test), rtol=1e-7)


def test_singular_covariance_uses_the_pseudo_inverse(make_acts, id_test):
    """20 samples in 32 dimensions: the covariance has rank <= 10; scores stay finite and exact."""
    small = make_acts(20, 10, 32, seed=7)
    det = create("mahalanobis").fit(small)
    scores = det.score(id_test)
    assert np.isfinite(scores).all()
    f, y = small.features.astype(np.float64), small.labels
    classes = np.unique(y)
    means = np.stack([f[y == c].mean(axis=0) for c in classes])
    centred = f - means[np.searchsorted(classes, y)]
    precision = scipy.linalg.pinvh(centred.T @ centred / len(f))
    x = id_test.features.astype(np.float64)
    d = np.stack([np.einsum("nd,de,ne->n", x - m, precision, x - m) for m in means], axis=1)
    # pinvh against our eigenvalue cut-off on a rank-10 covariance: the kept eigenvalues agree
    # to ~1e-13 relative, the distances (never near 0) too
    np.testing.assert_allclose(scores, -d.min(axis=1), rtol=1e-6)


def test_classes_absent_from_the_fit_set_are_skipped(id_train, id_test):
    keep = id_train.labels < 6
    det = create("mahalanobis").fit(id_train.subset(keep))
    np.testing.assert_array_equal(det.classes_, np.arange(6))
    np.testing.assert_allclose(det.score(id_test), _closed_form(id_train.subset(keep), id_test), rtol=1e-9)  # as above


def test_errors(make_acts, id_test):
    with pytest.raises(NotFittedError):
        create("mahalanobis").score(id_test)
    with pytest.raises(EmptyInputError, match="label"):
        create("mahalanobis").fit(make_acts(30, 10, 32, ood=True))
    no_features = make_acts(30, 10, 32)
    no_features.features = None
    with pytest.raises(MissingActivationError, match="features"):
        create("mahalanobis").fit(no_features)
