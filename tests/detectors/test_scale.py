"""SCALE against pytorch-ood 0.4.0 and an independent numpy computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import SCALE as PoodSCALE

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


def test_matches_numpy(id_test, ood_test):
    det = create("scale")
    assert det.percentile == 85.0 and not det.needs_fit
    for acts in (id_test, ood_test):
        f = acts.features.astype(np.float64)
        k = f.shape[1] - int(np.round(f.shape[1] * 0.85))
        top = -np.sort(-f, axis=1)[:, :k].sum(axis=1)
        scaled = f * np.exp(f.sum(axis=1) / top)[:, None]  # every unit kept, none pruned
        expected, bound = head_energy_reference(scaled, acts.head_weight, acts.head_bias)
        assert_within(det.score(acts), expected, bound)  # float32 head product (oodbench.compute)


@pytest.mark.parametrize("percentile", [65.0, 85.0, 95.0])
def test_matches_pytorch_ood(id_test, ood_test, percentile):
    w = torch.as_tensor(id_test.head_weight, dtype=torch.float64)
    b = torch.as_tensor(id_test.head_bias, dtype=torch.float64)
    ref = PoodSCALE(backbone=lambda x: x, head=lambda x: x.flatten(1) @ w.T + b,
                    percentile=percentile / 100)
    det = create("scale", percentile=percentile)
    for acts in (id_test, ood_test):
        fmap = torch.as_tensor(acts.features, dtype=torch.float64)[:, :, None, None]
        np.testing.assert_allclose(
            det.score(acts), -ref.predict_feature_maps(fmap).numpy(), rtol=1e-5
        )


def test_errors():
    with pytest.raises(InvalidInputError, match=r"'scale': percentile must be in \[0, 100\)"):
        create("scale", percentile=100.0)
