"""torchvision adapter: every supported family's split reproduces the model's own forward."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest
import torch
from torchvision import models as tv

from oodbench.errors import (
    ClassCountMismatchError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)
from oodbench.models import load
from oodbench.models.torchvision_models import TorchvisionClassifier
from tests.models.checks import assert_classifier_consistent, batch


def test_resnet50_at_224() -> None:
    clf = load("torchvision:resnet50", pretrained=False)
    assert isinstance(clf, TorchvisionClassifier) and clf.spec == "torchvision:resnet50"
    assert clf.num_classes == 1000 and clf.class_names is None
    out = assert_classifier_consistent(clf, batch(224), clf.model, batch(64, seed=1))
    assert out["feature_map"].shape == (2, 2048, 7, 7) and out["features"].shape == (2, 2048)
    assert "ImageClassification" in repr(clf.transform) and "crop_size=[224]" in repr(clf.transform)


def _regnet() -> tv.RegNet:
    from torchvision.models.regnet import BlockParams

    return tv.RegNet(BlockParams.from_init_params(2, 8, 8.0, 2.0, 8), num_classes=5)


def _convnext() -> tv.ConvNeXt:
    from torchvision.models.convnext import CNBlockConfig

    return tv.ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=5)


def _vit(representation_size: int | None) -> tv.VisionTransformer:
    return tv.VisionTransformer(
        image_size=32,
        patch_size=16,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        mlp_dim=64,
        num_classes=5,
        representation_size=representation_size,
    )


# (builder, input size, feature-map shape without the batch): one per family of the split
# table, small configurations of the real classes so that the test stays quick
FAMILIES = {
    "resnet": (lambda: tv.resnet18(num_classes=5), 64, (512, 2, 2)),
    "regnet": (_regnet, 64, (16, 8, 8)),
    "densenet": (lambda: tv.DenseNet(8, (2, 2, 2, 2), 16, num_classes=5), 64, (32, 2, 2)),
    "convnext": (_convnext, 64, (32, 8, 8)),
    "efficientnet": (lambda: tv.efficientnet_b0(num_classes=5), 64, (1280, 2, 2)),
    "mobilenet_v2": (lambda: tv.mobilenet_v2(num_classes=5), 64, (1280, 2, 2)),
    "mobilenet_v3": (lambda: tv.mobilenet_v3_small(num_classes=5), 64, (576, 2, 2)),
    "alexnet": (lambda: tv.alexnet(num_classes=5), 64, (256, 1, 1)),
    "vit": (lambda: _vit(None), 32, (5, 32)),
    "vit_pre_logits": (lambda: _vit(16), 32, (5, 32)),
    "swin": (
        lambda: tv.SwinTransformer([4, 4], 8, [1, 1, 1, 1], [1, 1, 1, 1], [2, 2], num_classes=5),
        64,
        (64, 2, 2),
    ),
    "maxvit": (
        lambda: tv.MaxVit(
            (64, 64),
            stem_channels=8,
            partition_size=2,
            block_channels=[8, 16],
            block_layers=[1, 1],
            head_dim=4,
            stochastic_depth_prob=0.0,
            num_classes=5,
        ),
        64,
        (16, 8, 8),
    ),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_split(family: str) -> None:
    build, size, fmap = FAMILIES[family]
    torch.manual_seed(0)
    model = build().eval()
    clf = TorchvisionClassifier(model, spec="test", transform=lambda im: im).eval()
    assert clf.num_classes == 5
    head = clf.head_module()
    assert isinstance(head, torch.nn.Linear)
    torch.nn.init.normal_(head.weight)  # torchvision zero-initialises some heads (ViT)
    if head.bias is not None:
        torch.nn.init.normal_(head.bias)
    else:  # MaxViT's head has no bias: head_bias is zeros
        assert family == "maxvit" and not clf.head_bias.any()
    out = assert_classifier_consistent(clf, batch(size, n=2), model)
    assert tuple(out["feature_map"].shape[1:]) == fmap


def test_densenet_feature_map_is_what_gets_pooled() -> None:
    # DenseNet applies ReLU after `features`; the feature map is the pooled (non-negative) map
    clf = TorchvisionClassifier(FAMILIES["densenet"][0]().eval(), spec="d", transform=lambda i: i)
    with torch.inference_mode():
        assert clf.feature_map(batch(64, n=1)).min() >= 0


def test_unsupported_family_points_to_wrap() -> None:
    with pytest.raises(InvalidInputError, match="wrap"):
        TorchvisionClassifier(
            tv.squeezenet1_1(), spec="torchvision:squeezenet1_1", transform=lambda i: i
        )


def test_local_weights_and_class_count(tmp_path: Path) -> None:
    clf = load("torchvision:mobilenet_v3_small", pretrained=False, num_classes=4)
    torch.save(clf.model.state_dict(), tmp_path / "w.pth")
    again = load("torchvision:mobilenet_v3_small", weights=tmp_path / "w.pth", num_classes=4)
    assert again.weights_digest() == clf.weights_digest()
    with pytest.raises(ClassCountMismatchError):
        load("torchvision:mobilenet_v3_small", weights=tmp_path / "w.pth")


def test_offline_and_bad_names(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.models._api as api

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(api, "load_state_dict_from_url", offline)
    with pytest.raises(MissingDataError, match=r"checkpoints.*weights=PATH"):
        load("torchvision:resnet18")
    with pytest.raises(ClassCountMismatchError, match="1000 classes"):
        load("torchvision:resnet18", num_classes=10)
    with pytest.raises(UnknownNameError, match="resnet18"):
        load("torchvision:resnet81", pretrained=False)
    with pytest.raises(UnknownNameError):
        load("torchvision:fasterrcnn_resnet50_fpn", pretrained=False)
