"""MCM against pytorch-ood 0.4.0 and against a hand-computed case."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import MCM as RefMCM

from oodbench.detectors import create
from oodbench.extract.activations import Activations


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
    ours = create("mcm", temperature=temperature).fit().score(_acts(feats, 100.0 * text))
    ref = RefMCM(None, torch.from_numpy(text), temperature=temperature)
    theirs = -ref.predict_features(torch.from_numpy(feats)).double().numpy()  # they: higher = OOD
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_mcm_hand_computed():
    # two orthogonal class embeddings; an image on the first axis has cosines (1, 0)
    feats = np.array([[2.0, 0.0], [1.0, 1.0]])
    weight = np.array([[50.0, 0.0], [0.0, 3.0]])  # row norms cancel
    scores = create("mcm").fit().score(_acts(feats, weight))
    e = np.e
    np.testing.assert_allclose(scores, [e / (e + 1.0), 0.5], rtol=1e-12)
