"""VRA against an independent numpy computation of the paper's piecewise function, and against
pytorch-ood 0.4.0 where the two definitions coincide."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import VRA as PoodVRA

from oodbench.detectors import create
from oodbench.detectors.vra import vra
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


def _numpy_vra(z, alpha, beta, gamma):
    out = np.empty_like(z)
    for idx, v in np.ndenumerate(z):
        a = alpha if np.ndim(alpha) == 0 else alpha[idx[1]]
        b = beta if np.ndim(beta) == 0 else beta[idx[1]]
        out[idx] = 0.0 if v < a else (b if v > b else v + gamma)
    return out


@pytest.mark.parametrize("per_unit", [True, False])
@pytest.mark.parametrize("gamma", [0.0, 0.3])
def test_matches_numpy(id_train, id_test, ood_test, per_unit, gamma):
    det = create("vra", lower_percentile=55, upper_percentile=92, gamma=gamma, per_unit=per_unit)
    det.fit(id_train)
    train = id_train.features.astype(np.float64)
    axis = 0 if per_unit else None
    alpha, beta = np.percentile(train, 55, axis=axis), np.percentile(train, 92, axis=axis)
    for acts in (id_test, ood_test):
        shaped = _numpy_vra(acts.features.astype(np.float64), alpha, beta, gamma)
        expected, bound = head_energy_reference(shaped, acts.head_weight, acts.head_bias)
        assert_within(det.score(acts), expected, bound)  # float32 head product (oodbench.compute)


@pytest.mark.parametrize("clip_low", [False, True])
@pytest.mark.parametrize("gamma", [0.0, 0.1])
def test_float32_shaping_equals_the_float64_function_rounded(gamma, clip_low):
    """Features shaped in float32 against float64 thresholds that lie on, just above and just
    below float32 values: the same as shaping in float64, then rounding to float32."""
    rng = np.random.default_rng(3)
    z = torch.from_numpy((rng.random((400, 16)) * 3).astype(np.float32))
    on = z[0].double()
    nudge = torch.tensor([0.0, 1e-12, -1e-12, 2e-8] * 4, dtype=torch.float64)
    alpha, beta = on + nudge, on + 1.0 + nudge
    for row, threshold in ((1, alpha), (4, beta)):  # features at the thresholds' float32 neighbours
        near = threshold.float()
        z[row], z[row + 1] = near, torch.nextafter(near, torch.tensor(np.inf, dtype=torch.float32))
        z[row + 2] = torch.nextafter(near, torch.tensor(-np.inf, dtype=torch.float32))
    z64 = z.double()
    low = alpha if clip_low else torch.zeros_like(alpha)
    expected = torch.where(z64 < alpha, low, torch.where(z64 > beta, beta, z64 + gamma))
    got = vra(z, alpha, beta, gamma, clip_low)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected.float())
    assert torch.equal(vra(z64, alpha, beta, gamma, clip_low), expected)


def test_matches_pytorch_ood_where_no_activation_is_below_alpha(id_train):
    """pytorch-ood clips to [alpha, beta] (below alpha -> alpha, the paper -> 0); with alpha the
    per-unit training minimum and test rows from the training set, no entry is below alpha."""
    w = torch.as_tensor(id_train.head_weight, dtype=torch.float64)
    b = torch.as_tensor(id_train.head_bias, dtype=torch.float64)
    ref = PoodVRA(backbone=lambda x: x, head=lambda x: x.flatten(1) @ w.T + b,
                  lower_percentile=0.0, upper_percentile=0.9)
    fmap = torch.as_tensor(id_train.features, dtype=torch.float64)[:, :, None, None]
    ref.fit_feature_maps(fmap, torch.as_tensor(id_train.labels))
    test = id_train.subset(np.arange(0, len(id_train), 3))
    theirs = ref.predict_feature_maps(fmap[::3])
    ours = create("vra", lower_percentile=0, upper_percentile=90).fit(id_train).score(test)
    np.testing.assert_allclose(ours, -theirs.numpy(), rtol=1e-5)


def test_differs_from_pytorch_ood_below_alpha(id_train, id_test):
    """Documented difference: with a positive alpha the paper zeroes low activations."""
    w = torch.as_tensor(id_train.head_weight, dtype=torch.float64)
    b = torch.as_tensor(id_train.head_bias, dtype=torch.float64)
    ref = PoodVRA(backbone=lambda x: x, head=lambda x: x.flatten(1) @ w.T + b,
                  lower_percentile=0.6, upper_percentile=0.9)
    ref.fit_feature_maps(torch.as_tensor(id_train.features, dtype=torch.float64)[:, :, None, None],
                         torch.as_tensor(id_train.labels))
    theirs = -ref.predict_feature_maps(
        torch.as_tensor(id_test.features, dtype=torch.float64)[:, :, None, None]).numpy()
    ours = create("vra").fit(id_train).score(id_test)
    assert np.abs(ours - theirs).max() > 1e-3


def test_errors():
    with pytest.raises(InvalidInputError, match="lower_percentile <= upper_percentile"):
        create("vra", lower_percentile=95, upper_percentile=90)
    with pytest.raises(InvalidInputError, match="upper_percentile"):
        create("vra", upper_percentile=101)
