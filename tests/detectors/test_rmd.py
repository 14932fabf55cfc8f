import numpy as np
from sklearn.covariance import EmpiricalCovariance

from oodbench.detectors import create
from tests.detectors._reference import assert_rel, float64_default, pod, tensor
from tests.detectors.test_mahalanobis import _closed_form as mahalanobis_closed_form


def test_closed_form(id_train, id_test, ood_test):
    det = create("rmd").fit(id_train)
    f = id_train.features.astype(np.float64)
    background = EmpiricalCovariance().fit(f)  # centred on the mean, divides by N
    for acts in (id_test, ood_test):
        x = acts.features.astype(np.float64) - background.location_
        md0 = np.einsum("nd,de,ne->n", x, background.precision_, x)
        expected = md0 + mahalanobis_closed_form(id_train, acts)  # -min_k (MD_k - MD_0)
        # float64 both: two squared distances of size ~32 (covariances of condition number ~3)
        # cancel, so the error is ~1e-14 absolute: the floor 1e-9 * max|score| is far above it
        np.testing.assert_allclose(det.score(acts), expected, rtol=1e-8, atol=1e-9 * np.abs(expected).max())


def test_matches_pytorch_ood_up_to_n(id_train, id_test, ood_test):
    """pytorch-ood's scatter matrices are N * Sigma and N * Sigma_0: kappa = -N * pt."""
    det = create("rmd").fit(id_train)
    with float64_default():
        ref = pod().RMD(None).fit_features(tensor(id_train.features), tensor(id_train.labels, None))
        for acts in (id_test, ood_test):
            pt = ref.predict_features(tensor(acts.features))
            # scores cross zero: relative 1e-5 plus an absolute floor of 1e-6 * max|ref| (the 1e-6 ridge)
            assert_rel(det.score(acts), -len(id_train) * pt, rtol=1e-5, floor=1e-6)


def test_invariant_to_invertible_affine_maps(id_train, id_test):
    """Mahalanobis distances do not change under f -> A f + c (A invertible)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(32, 32)) + 4 * np.eye(32)
    c = rng.normal(size=32)

    def mapped(acts):
        out = acts.subset(np.arange(len(acts)))
        out.features = acts.features.astype(np.float64) @ a.T + c
        return out

    det, det_mapped = create("rmd").fit(id_train), create("rmd").fit(mapped(id_train))
    # exact in real arithmetic; float64 rounding through A (condition number ~100) of distances
    # of size ~32 that cancel: ~1e-12 absolute, far inside 1e-7
    np.testing.assert_allclose(det_mapped.score(mapped(id_test)), det.score(id_test), rtol=1e-6, atol=1e-7)
