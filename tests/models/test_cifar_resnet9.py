import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.models.cifar_resnet9 import CifarResNet9
from tests.models.checks import assert_linear_head


def test_width_64_has_pages_parameter_count():
    """Page's ResNet-9 (width 64, 10 classes) has 6,573,120 parameters: 6,563,520 in its eight
    3x3 convolutions, 4,480 in their batch norms and 5,120 in its bias-free head; ours adds
    the head's 10 biases."""
    assert sum(p.numel() for p in CifarResNet9(10, width=64).parameters()) == 6_573_120 + 10


def test_parts_compose_to_the_logits():
    model = CifarResNet9(6, width=8, seed=3)
    x = torch.randn(5, 3, 32, 32)
    fmap = model.feature_map(x)
    assert fmap.shape == (5, 64, 4, 4) and bool((fmap >= 0).all())
    features = model.features(x)
    torch.testing.assert_close(features, fmap.amax(dim=(2, 3)))  # a max selects: exact
    assert_linear_head(model(x), features, model.head_weight, model.head_bias)


def test_seed_decides_the_initial_weights_and_the_spec():
    a, b, c = (CifarResNet9(3, width=4, seed=s) for s in (0, 0, 1))
    assert a.weights_digest() == b.weights_digest() != c.weights_digest()
    assert a.spec != c.spec and "width=4" in a.spec


def test_bad_arguments():
    with pytest.raises(InvalidInputError, match="2 classes"):
        CifarResNet9(1)
    with pytest.raises(InvalidInputError, match="positive width"):
        CifarResNet9(3, width=0)
