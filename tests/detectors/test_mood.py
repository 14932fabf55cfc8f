"""MOOD's score against a direct NumPy re-statement of dvlab-research/MOOD ood_utils.mahalanobis
(after eval_with_features.get_eval_results' L2 normalisation), for the three conditionings."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests.detectors.conftest import make_activations


def _official(ftrain, ftest, labels, mode):
    """The official computation: normalise, np.cov(bias=True), np.linalg.pinv, squared distance."""
    norm = lambda f: f / (np.linalg.norm(f, axis=-1, keepdims=True) + 1e-10)  # noqa: E731
    ftest = norm(ftest.astype(np.float64))
    groups = ([norm(ftrain[labels == c].astype(np.float64)) for c in np.unique(labels)]
              if mode != "agnostic" else [norm(ftrain.astype(np.float64))])
    d = []
    for g in groups:
        precision = np.linalg.pinv(np.cov(g.T, bias=True))
        mean = g.mean(axis=0, keepdims=True)
        d.append(np.sum((ftest - mean) * (precision.dot((ftest - mean).T)).T, axis=-1))
    d = np.array(d)
    distance = d[0] if mode == "agnostic" else (d.min(0) if mode == "class_min" else d.mean(0))
    return -distance  # the code ranks distances with OOD as the positive class


@pytest.mark.parametrize("mode", ["agnostic", "class_min", "class_mean"])
def test_matches_official(mode):
    train = make_activations(600, 4, 16, seed=0)
    test, ood = make_activations(50, 4, 16, seed=1), make_activations(40, 4, 16, seed=2, ood=True)
    det = create("mood", conditioning=mode).fit(train)
    for acts in (test, ood):
        ref = _official(train.features, acts.features, train.labels, mode)
        # ours keeps the L2-normalised float32 features in float32 (mood.l2_normalised), the
        # official code in float64: that rounding, fixed by the data (NumPy's norms sum in one
        # order: the same bits on every CPU), moves the distances by up to 4.4e-7 relative
        # here; what differs between CPUs is the float64 whitening's rounding, ~1e-13
        np.testing.assert_allclose(det.score(acts), ref, rtol=1e-6, atol=1e-8)


def test_is_not_lee_mahalanobis_and_ignores_the_feature_scale():
    train, test = make_activations(600, 4, 16, seed=0), make_activations(50, 4, 16, seed=1)
    mood = create("mood").fit(train).score(test)
    assert not np.allclose(mood, create("mahalanobis").fit(train).score(test), rtol=1e-2)
    scaled = test.subset(np.arange(len(test)))
    scaled.features = scaled.features * np.linspace(0.5, 3.0, len(test), dtype=np.float32)[:, None]
    # the normalisation undoes the scale up to the float32 rounding of f / ||f|| (above)
    np.testing.assert_allclose(create("mood").fit(train).score(scaled), mood, rtol=1e-5)


def test_errors():
    with pytest.raises(InvalidInputError, match="conditioning must be one of"):
        create("mood", conditioning="tied")
    assert create("mood", preset="paper").conditioning == "agnostic"
