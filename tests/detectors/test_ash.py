"""ASH-P/B/S against pytorch-ood 0.4.0 and independent numpy computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import ASH as PoodASH

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference


def _numpy_ash(features, percentile, variant):
    """Per-sample loop straight from the paper's definitions (no top-k helper)."""
    out = np.zeros_like(features, dtype=np.float64)
    d = features.shape[1]
    k = d - int(np.round(d * percentile / 100))
    for i, a in enumerate(features.astype(np.float64)):
        keep = np.argsort(-a, kind="stable")[:k]
        if variant == "p":
            out[i, keep] = a[keep]
        elif variant == "b":
            out[i, keep] = a.sum() / k
        else:
            out[i, keep] = a[keep] * np.exp(a.sum() / a[keep].sum())
    return out


@pytest.mark.parametrize(("name", "variant", "default"), [("ash_p", "p", 60), ("ash_b", "b", 65),
                                                          ("ash_s", "s", 90)])
def test_defaults_and_numpy(id_test, name, variant, default):
    det = create(name)
    assert det.percentile == default
    # strictly positive features, so the top-k set has no ties
    acts = id_test.subset(np.arange(len(id_test)))
    acts.features = acts.features + np.random.default_rng(0).uniform(1e-3, 2e-3, acts.features.shape)
    shaped = _numpy_ash(acts.features, default, variant)
    # float64 features (+ the float64 offsets): a float64 head product and float64 exps
    expected, bound = head_energy_reference(shaped, acts.head_weight, acts.head_bias, np.float64)
    assert_within(det.score(acts), expected, bound)
    assert not det.needs_fit


@pytest.mark.parametrize("variant", ["p", "b", "s"])
@pytest.mark.parametrize("percentile", [65.0, 90.0])
def test_matches_pytorch_ood(id_test, ood_test, variant, percentile):
    """pytorch-ood on the (B, D, 1, 1) penultimate map, percentile as a fraction, sign flipped."""
    w = torch.as_tensor(id_test.head_weight, dtype=torch.float64)
    b = torch.as_tensor(id_test.head_bias, dtype=torch.float64)
    ref = PoodASH(backbone=lambda x: x, head=lambda x: x.flatten(1) @ w.T + b,
                  variant=f"ash-{variant}", percentile=percentile / 100)
    det = create(f"ash_{variant}", percentile=percentile)
    for acts in (id_test, ood_test):
        fmap = torch.as_tensor(acts.features, dtype=torch.float64)[:, :, None, None]
        np.testing.assert_allclose(
            det.score(acts), -ref.predict_feature_maps(fmap).numpy(), rtol=1e-5
        )


def test_errors():
    with pytest.raises(InvalidInputError, match=r"'ash_s': percentile must be in \[0, 100\)"):
        create("ash_s", percentile=100)
