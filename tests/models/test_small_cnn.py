"""The demo's small CNN: the Classifier identities, seeded weights, training that learns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models.small_cnn import SmallCNN, to_tensor
from oodbench.train.small_cnn import train_small_cnn
from tests.models.checks import assert_linear_head


def test_classifier_parts_and_linear_head_identity():
    model = SmallCNN(4, width=16, seed=3)
    x = torch.rand(5, 1, 8, 8)
    out = model.forward_all(x, ("logits", "features", "feature_map"))
    assert out["feature_map"].shape == (5, 16, 4, 4) and out["features"].shape == (5, 16)
    assert (out["features"] >= 0).all()  # ReLU features, as ReAct/ASH assume
    assert_linear_head(out["logits"], out["features"], model.head_weight, model.head_bias)
    assert any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())
    assert not model.training


def test_weights_depend_only_on_the_seed_and_keep_the_global_rng():
    state = torch.random.get_rng_state()
    a, b, c = SmallCNN(3, seed=1), SmallCNN(3, seed=1), SmallCNN(3, seed=2)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert a.weights_digest() == b.weights_digest() != c.weights_digest()


def test_transform_makes_grey_8x8_in_unit_range():
    image = Image.fromarray(np.full((32, 24, 3), 255, dtype=np.uint8))
    t = to_tensor(image)
    assert t.shape == (1, 8, 8) and torch.allclose(t, torch.ones_like(t))


def test_training_learns_a_separable_problem_deterministically():
    rng = np.random.default_rng(0)
    images = np.zeros((60, 8, 8), dtype=np.uint8)
    labels = np.arange(60) % 2
    images[labels == 0, :, :4] = 255  # left half bright
    images[labels == 1, :, 4:] = 255  # right half bright
    images = np.clip(images + rng.integers(0, 40, images.shape), 0, 255).astype(np.uint8)
    a = train_small_cnn(images, labels, epochs=15, seed=0, width=16)
    b = train_small_cnn(images, labels, epochs=15, seed=0, width=16)
    assert a.weights_digest() == b.weights_digest()
    x = torch.from_numpy(images.astype(np.float32) / 255).unsqueeze(1)
    with torch.no_grad():
        assert (a(x).argmax(1).numpy() == labels).mean() == 1.0


def test_bad_training_input():
    with pytest.raises(InvalidInputError, match=r"shape \(N, 8, 8\)"):
        train_small_cnn(np.zeros((3, 9, 9), dtype=np.uint8), np.zeros(3))
    with pytest.raises(InvalidInputError, match=r"labels must lie in \[0, 2\)"):
        train_small_cnn(np.zeros((3, 8, 8), dtype=np.uint8), np.array([0, 1, 2]), num_classes=2)
    with pytest.raises(InvalidInputError, match="at least 2 classes"):
        SmallCNN(1)
