import numpy as np
import pytest
import scipy.special
import torch
from sklearn.covariance import EmpiricalCovariance

from oodbench.detectors import create
from oodbench.detectors.vim import default_principal_dim, origin
from oodbench.errors import InvalidInputError, MissingActivationError
from tests._tolerance import U32, assert_within, gamma
from tests.detectors._reference import energy_error, float32_casts_as_float64, pod, tensor


def _official(train, acts, dim: int) -> np.ndarray:
    """The computation of the ViM authors' benchmark.py, in float64 numpy."""
    w, b = train.head_weight.astype(np.float64), train.head_bias.astype(np.float64)
    f_train, f = train.features.astype(np.float64), acts.features.astype(np.float64)
    u = -np.linalg.pinv(w) @ b
    cov = EmpiricalCovariance(assume_centered=True).fit(f_train - u).covariance_
    eig_vals, eig_vecs = np.linalg.eigh(cov)
    ns = eig_vecs[:, np.argsort(-eig_vals)[dim:]]
    alpha = (f_train @ w.T + b).max(axis=1).mean() / np.linalg.norm((f_train - u) @ ns, axis=1).mean()
    vlogit = np.linalg.norm((f - u) @ ns, axis=1) * alpha
    return scipy.special.logsumexp(acts.logits.astype(np.float64), axis=1) - vlogit


def _rounding(det, train, acts) -> np.ndarray:
    """Per row, how far our scores may be from a float64 computation: the float32 projection of
    ``f - u`` on the residual space (``D`` terms and the roundings of ``f - u``: each coordinate
    within ``gamma(D + 2)`` of ``|f - u| |R|``, the norm within the norm of those, and the
    float32 norm's own ``gamma(D)``), alpha's float32 logits and projections (the same, relative,
    through the fit rows' mean), the float32 logits themselves (``u |z|``) and the exp pass."""
    u, space, dim = det.origin_.numpy(), det.residual_space_.numpy(), train.features.shape[1]

    def norm_and_error(features):
        centred = np.abs(features.astype(np.float64) - u)
        size = np.linalg.norm(centred @ space, axis=1)
        error = np.linalg.norm(gamma(dim + 2, U32) * (centred @ np.abs(space)), axis=1)
        return size, error + gamma(dim, U32) * size

    size, error = norm_and_error(acts.features)
    fit_size, fit_error = norm_and_error(train.features)
    alpha_rel = fit_error.mean() / fit_size.mean() + U32
    logits = np.asarray(acts.logits, np.float64)
    return (det.alpha_ * (error + alpha_rel * size) + U32 * np.abs(logits).max(axis=1)
            + energy_error(acts.logits))


@pytest.mark.parametrize("dim", [8, 16, 24])
def test_matches_official_code_and_pytorch_ood(id_train, id_test, ood_test, dim):
    det = create("vim", dim=dim).fit(id_train)
    with float32_casts_as_float64():  # pytorch-ood's ViM casts everything with .float()
        ref = pod().ViM(None, d=dim, w=tensor(id_train.head_weight), b=tensor(id_train.head_bias))
        ref.fit_features(tensor(id_train.features), tensor(id_train.labels, None))
        refs = [ref.predict_features(tensor(acts.features)) for acts in (id_test, ood_test)]
    # float32 projections of 32 features (and float32 max logits) in alpha: ~1e-7 relative
    np.testing.assert_allclose(det.alpha_, ref.alpha, rtol=1e-6)
    for acts, pt in zip((id_test, ood_test), refs):
        ours = det.score(acts)
        official = _official(id_train, acts, dim)  # alpha from float64 logits, ours from stored
        # float32 projections and exps (oodbench.compute); the scores cross zero: absolute
        bound = _rounding(det, id_train, acts)
        assert_within(ours, official, bound)
        # pytorch-ood (run in float64) recomputes the logits from the features
        assert_within(ours, -pt.numpy(), bound)


def test_agrees_with_pytorch_ood_in_float32_to_its_precision(id_train, id_test):
    """pytorch-ood's own float32 run: its eigenvectors carry ~1e-4 relative error."""
    det = create("vim", dim=16).fit(id_train)
    ref = pod().ViM(None, d=16, w=tensor(id_train.head_weight), b=tensor(id_train.head_bias))
    ref.fit_features(tensor(id_train.features), tensor(id_train.labels, None))
    pt = -ref.predict_features(tensor(id_test.features, torch.float32)).numpy()
    assert np.abs(det.score(id_test) - pt).max() < 1e-3 * np.abs(pt).max()


def test_default_principal_dimension():
    # the official benchmark.py rule (1000 if >= 2048 else 512); half the width where 512 is impossible
    assert [default_principal_dim(d) for d in (4096, 2048, 1536, 1280, 768, 600, 512, 32)] == [
        1000, 1000, 512, 512, 512, 512, 256, 16]
    assert create("vim").dim is None


def test_default_dim_is_used(id_train, id_test):
    det = create("vim").fit(id_train)
    assert det.principal_dim_ == 16
    official = _official(id_train, id_test, 16)
    assert_within(det.score(id_test), official, _rounding(det, id_train, id_test))


def test_errors(id_train, make_acts):
    with pytest.raises(InvalidInputError, match="dim"):
        create("vim", dim=32).fit(id_train)
    with pytest.raises(MissingActivationError, match="head_weight"):
        create("vim").fit(make_acts(40, 10, 32, with_head=False))


@pytest.mark.parametrize(
    "case", ["full row rank", "more classes than features", "rank deficient"]
)
def test_origin_is_minus_pinv_w_times_b(case):
    """u = -pinv(W) b: by Cholesky of W W^T where that is exact, else by gelsy."""
    rng = np.random.default_rng(0)
    shape = (40, 24) if case == "more classes than features" else (12, 24)
    weight = rng.normal(size=shape)
    if case == "rank deficient":
        weight[6:] = rng.normal(size=(6, 6)) @ weight[:6]  # rank 6 < 12 classes
    bias = rng.normal(size=shape[0])
    u = origin(torch.from_numpy(weight), torch.from_numpy(bias)).numpy()
    # float64 least squares of a well-conditioned (or exactly rank-6) 24-column system against
    # an SVD pseudo-inverse: ~1e-14 apart
    np.testing.assert_allclose(u, -np.linalg.pinv(weight) @ bias, rtol=1e-9, atol=1e-12)
