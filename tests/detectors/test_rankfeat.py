"""RankFeat against pytorch-ood 0.4.0 and a numpy SVD, from cached maps and through a model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import RankFeat as PoodRankFeat
from scipy.special import logsumexp

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from oodbench.models.small_cnn import SmallCNN
from tests.detectors.conftest import make_activations


@pytest.fixture
def maps():
    return make_activations(40, 10, 32, seed=3, feature_map=(5, 4))


@pytest.mark.parametrize(("dim", "hw"), [(32, (5, 4)), (8, (6, 5))])  # HW < C and HW > C
def test_matches_numpy_svd(dim, hw):
    maps = make_activations(40, 10, dim, seed=3, feature_map=hw)
    expected = []
    for m in maps.feature_map.astype(np.float64):
        x = m.reshape(m.shape[0], -1)
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        pooled = (x - s[0] * np.outer(u[:, 0], vt[0])).mean(axis=1)
        expected.append(logsumexp(pooled @ maps.head_weight.T + maps.head_bias))
    det = create("rankfeat")
    assert not det.needs_fit
    # float64 SVDs (torch's and LAPACK's): the top singular pair is separated by a relative
    # gap >= 0.49 here, so it is within ~1e-15 in both; energies ~5 never near 0
    np.testing.assert_allclose(det.score(maps), expected, rtol=1e-10)


def test_matches_pytorch_ood(maps):
    w = torch.as_tensor(maps.head_weight, dtype=torch.float64)
    b = torch.as_tensor(maps.head_bias, dtype=torch.float64)
    ref = PoodRankFeat(backbone=lambda x: x, head=lambda x: x.mean(dim=(2, 3)) @ w.T + b)
    theirs = ref.predict_feature_maps(torch.as_tensor(maps.feature_map, dtype=torch.float64))
    np.testing.assert_allclose(create("rankfeat").score(maps), -theirs.numpy(), rtol=1e-5)  # float64 both


class _MaxPoolCNN(SmallCNN):
    """A classifier whose pooling is global *max* pooling, so its path differs from GAP."""

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return feature_map.amax(dim=(2, 3))


def test_through_the_models_pool_and_head(maps):
    """With a model at fit, its own pool and head run on the rank-1-removed map."""
    model = _MaxPoolCNN(num_classes=10, width=32, seed=0)
    w = model.head_weight.detach().double().numpy()
    b = model.head_bias.detach().double().numpy()
    expected = []
    for m in maps.feature_map.astype(np.float64):
        x = m.reshape(m.shape[0], -1)
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        pooled = (x - s[0] * np.outer(u[:, 0], vt[0])).max(axis=1)
        expected.append(logsumexp(pooled @ w.T + b))
    live = create("rankfeat").fit(None, model=model).score(maps)
    np.testing.assert_allclose(live, expected, rtol=1e-5)  # the model runs in float32


def test_rejects_token_maps(maps):
    maps.feature_map = maps.feature_map.reshape(len(maps), 32, 20)
    with pytest.raises(InvalidInputError, match="N, C, H, W"):
        create("rankfeat").score(maps)
