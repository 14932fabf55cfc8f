import pytest
import torch

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.models.cifar_resnet import CifarResNet, cifar_resnet
from tests.models.checks import assert_linear_head


def test_resnet18_has_the_reference_parameter_count():
    # the CIFAR ResNet-18 (3x3 stem, no max-pool, 1x1 projection shortcuts) with 10 classes
    # has 11,173,962 parameters, the count printed for the widely used CIFAR adaptation
    # (kuangliu/pytorch-cifar ResNet18); ResNet-20 has the paper's ~0.27 M (He et al. 2016)
    assert sum(p.numel() for p in cifar_resnet("resnet18", 10).parameters()) == 11_173_962
    n20 = sum(p.numel() for p in cifar_resnet("resnet20", 10).parameters())
    assert 0.26e6 < n20 < 0.28e6


def test_parts_compose_to_the_logits():
    model = CifarResNet(6, widths=(8, 16), blocks=(1, 2), seed=3)
    x = torch.randn(5, 3, 32, 32)
    fmap = model.feature_map(x)
    assert fmap.shape == (5, 16, 16, 16) and bool((fmap >= 0).all())
    features = model.features(x)
    assert_linear_head(model(x), features, model.head_weight, model.head_bias)
    # the same mean pool of the same map: float32 defaults (rtol 1.3e-6) hold a pool's rounding
    torch.testing.assert_close(features, fmap.mean(dim=(2, 3)))


def test_seed_decides_the_initial_weights_and_the_spec():
    a, b, c = (CifarResNet(3, widths=(8,), blocks=(1,), seed=s) for s in (0, 0, 1))
    assert a.weights_digest() == b.weights_digest() != c.weights_digest()
    assert a.spec != c.spec and "widths=[8]" in a.spec


def test_bad_shapes_and_names():
    with pytest.raises(InvalidInputError, match="same length"):
        CifarResNet(3, widths=(8, 16), blocks=(1,))
    with pytest.raises(InvalidInputError, match="2 classes"):
        CifarResNet(1)
    with pytest.raises(UnknownNameError, match="resnet20"):
        cifar_resnet("resnet2O", 10)
