"""MCM against pytorch-ood 0.4.0 and against a hand-computed case."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import MCM as RefMCM

from oodbench.detectors import create
from oodbench.extract.activations import Activations
from tests.detectors._reference import float32_casts_as_float64


def _acts(features: np.ndarray, weight: np.ndarray) -> Activations:
    n, c = len(features), len(weight)
    return Activations(
        logits=(features @ weight.T).astype(np.float32),
        labels=np.zeros(n, dtype=np.int64),
        ids=np.arange(n).astype(str),
        features=features,
        head_weight=weight,
        head_bias=np.zeros(c, dtype=np.float32),
    )


@pytest.mark.parametrize("temperature", [1.0, 0.01, 5.0])
def test_mcm_matches_pytorch_ood(temperature):
    rng = np.random.default_rng(1)
    feats = rng.normal(size=(300, 24)).astype(np.float32)
    text = rng.normal(size=(10, 24)).astype(np.float32)
    head = 100.0 * text  # float32, as stored activations hold it
    ours = create("mcm", temperature=temperature).fit().score(_acts(feats, head))
    with float32_casts_as_float64():  # pytorch-ood casts with .float(): run it in float64 too
        ref = RefMCM(None, torch.from_numpy(head).double(), temperature=temperature)
        theirs = -ref.predict_features(torch.from_numpy(feats).double()).numpy()  # they: higher = OOD
    # float64 both: cosines of 24-term products within ~3e-15, divided by T >= 0.01 the
    # exponents within 3e-13, the max softmax within ~1e-12 relative
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)


def test_mcm_hand_computed():
    # two orthogonal class embeddings; an image on the first axis has cosines (1, 0)
    feats = np.array([[2.0, 0.0], [1.0, 1.0]])
    weight = np.array([[50.0, 0.0], [0.0, 3.0]])  # row norms cancel
    scores = create("mcm").fit().score(_acts(feats, weight))
    e = np.e
    # exps of 0 and 1 and one division: a few float64 ulps on any CPU
    np.testing.assert_allclose(scores, [e / (e + 1.0), 0.5], rtol=1e-12)
