"""ReAct against pytorch-ood 0.4.0 and an independent numpy computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import ReAct as PoodReAct
from scipy.special import logsumexp

from oodbench.detectors import NotFittedError, create
from oodbench.errors import InvalidInputError, MissingActivationError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference
from tests.detectors.conftest import make_activations


def test_matches_numpy_formula(id_train, id_test, ood_test):
    det = create("react").fit(id_train)
    threshold = np.percentile(id_train.features.astype(np.float64).ravel(), 90)
    assert det.threshold_ == pytest.approx(threshold, rel=1e-12)
    for acts in (id_test, ood_test):
        f = np.minimum(acts.features.astype(np.float64), threshold)
        expected, bound = head_energy_reference(f, acts.head_weight, acts.head_bias)
        assert_within(det.score(acts), expected, bound)  # float32 head product (oodbench.compute)


@pytest.mark.parametrize("p", [85.0, 90.0, 99.0])
def test_matches_pytorch_ood(id_train, id_test, p):
    """pytorch-ood clips its backbone output; given the penultimate features it is the paper's
    ReAct, with percentile as a fraction and the sign flipped (higher = more OOD)."""
    w = torch.as_tensor(id_test.head_weight, dtype=torch.float64)
    b = torch.as_tensor(id_test.head_bias, dtype=torch.float64)
    ref = PoodReAct(backbone=lambda x: x, head=lambda f: f @ w.T + b, percentile=p / 100)
    ref.fit_feature_maps(torch.as_tensor(id_train.features, dtype=torch.float64),
                         torch.as_tensor(id_train.labels))
    theirs = ref.predict_feature_maps(torch.as_tensor(id_test.features, dtype=torch.float64))
    ours = create("react", percentile=p).fit(id_train).score(id_test)
    np.testing.assert_allclose(ours, -theirs.numpy(), rtol=1e-5)


def test_clipping_helps_on_overactivated_ood():
    """OOD samples with abnormally large activations: ReAct separates them better than plain
    energy (the paper's motivation), on the synthetic model."""
    from oodbench.metrics import auroc

    train = make_activations(600, 10, 32, seed=0)
    test = make_activations(300, 10, 32, seed=1)
    ood = make_activations(300, 10, 32, seed=2, ood=True)
    ood.features[:, :4] *= 25.0  # a few units fire far above the ID range
    ood.logits[:] = ood.features @ ood.head_weight.T + ood.head_bias
    react = create("react").fit(train)
    energy_auroc = auroc(logsumexp(test.logits, axis=1), logsumexp(ood.logits, axis=1))
    react_auroc = auroc(react.score(test), react.score(ood))
    assert react_auroc > energy_auroc + 0.05


def test_errors(id_train, id_test):
    with pytest.raises(InvalidInputError, match="percentile"):
        create("react", percentile=120)
    with pytest.raises(NotFittedError):
        create("react").score(id_test)
    with pytest.raises(InvalidInputError, match="training activations"):
        create("react").fit(None)
    no_head = make_activations(20, 10, 32, seed=5, with_head=False)
    with pytest.raises(MissingActivationError, match="head_weight"):
        create("react").fit(id_train).score(no_head)
    mismatched = make_activations(20, 10, 32, seed=5)
    mismatched.head_weight = mismatched.head_weight[:, :16]
    with pytest.raises(InvalidInputError, match="do not match"):
        create("react").fit(id_train).score(mismatched)


def test_threshold_is_tau_directly(id_train, id_test):
    """``threshold=c`` clips at c itself: the same as the percentile whose value is c, and the
    score of min(f, c) by hand."""
    by_percentile = create("react", percentile=80).fit(id_train)
    tau = by_percentile.threshold_
    direct = create("react", threshold=tau).fit(id_train)
    # the same threshold through the same code in this process: the same bits
    np.testing.assert_array_equal(direct.score(id_test), by_percentile.score(id_test))
    shaped = np.minimum(id_test.features.astype(np.float64), 0.5)
    expected, bound = head_energy_reference(shaped, id_test.head_weight, id_test.head_bias)
    assert_within(create("react", threshold=0.5).fit(id_train).score(id_test), expected, bound)
    with pytest.raises(InvalidInputError, match="threshold must be a finite number"):
        create("react", threshold=float("nan"))
