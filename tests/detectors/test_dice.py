"""DICE against pytorch-ood 0.4.0 and an independent numpy computation (also with ReAct)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import DICE as PoodDICE

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference
from tests.detectors.conftest import make_activations


def _numpy_dice(train, acts, sparsity, clip=None):
    w = train.head_weight.astype(np.float64)
    contribution = w * train.features.astype(np.float64).mean(axis=0)
    masked = np.where(contribution > np.percentile(contribution, sparsity), w, 0.0)
    f = acts.features.astype(np.float64)
    if clip is not None:
        f = np.minimum(f, clip)
    return head_energy_reference(f, masked, train.head_bias), masked  # ((expected, bound), masked)


@pytest.mark.parametrize("sparsity", [10.0, 70.0, 90.0])
def test_matches_pytorch_ood(id_train, id_test, sparsity):
    ref = PoodDICE(
        encoder=None,
        w=torch.as_tensor(id_train.head_weight, dtype=torch.float64),
        b=torch.as_tensor(id_train.head_bias, dtype=torch.float64),
        p=sparsity / 100,
    )
    ref.fit_features(torch.as_tensor(id_train.features, dtype=torch.float64),
                     torch.as_tensor(id_train.labels))
    theirs = ref.predict_features(torch.as_tensor(id_test.features, dtype=torch.float64))
    ours = create("dice", sparsity=sparsity).fit(id_train).score(id_test)
    np.testing.assert_allclose(ours, -theirs.numpy(), rtol=1e-5)


def test_matches_numpy_and_keeps_the_right_fraction(id_train, id_test):
    det = create("dice").fit(id_train)
    (expected, bound), masked = _numpy_dice(id_train, id_test, 70.0)
    assert_within(det.score(id_test), expected, bound)  # float32 head product (oodbench.compute)
    np.testing.assert_array_equal(det.masked_weight_.numpy() != 0, masked != 0)
    assert (masked != 0).mean() == pytest.approx(0.3, abs=0.01)


def test_with_react(id_train, id_test, ood_test):
    det = create("dice", react_percentile=90.0).fit(id_train)
    clip = np.percentile(id_train.features.astype(np.float64), 90)
    for acts in (id_test, ood_test):
        (expected, bound), _ = _numpy_dice(id_train, acts, 70.0, clip=clip)
        assert_within(det.score(acts), expected, bound)  # float32 head product
    assert det.hyperparams == {"sparsity": 70.0, "react_percentile": 90.0, "fit_data": "train"}


def test_errors(id_train):
    with pytest.raises(InvalidInputError, match="sparsity"):
        create("dice", sparsity=100)
    with pytest.raises(InvalidInputError, match="react_percentile"):
        create("dice", react_percentile=-1)
    other = make_activations(20, 10, 16, seed=5)
    with pytest.raises(InvalidInputError, match="do not match"):
        create("dice").fit(id_train).score(other)
