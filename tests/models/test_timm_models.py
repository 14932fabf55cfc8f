"""timm adapter: the feature / pooled / head split on random-init models (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from oodbench.errors import (
    ClassCountMismatchError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)
from oodbench.models import load
from oodbench.models.timm_models import TimmClassifier
from tests.models.checks import assert_classifier_consistent, batch


@pytest.mark.parametrize(
    ("name", "fmap_shape", "small"),
    [
        ("resnet50", (2, 2048, 7, 7), 64),
        ("convnext_tiny", (2, 768, 7, 7), 64),
        ("efficientnet_b0", (2, 1280, 7, 7), 64),
        # the ViT path (class token + 196 patch tokens, a token map instead of a spatial one) in
        # timm's smallest ViT: the same VisionTransformer code as ViT-B/16 at 1/15 of the
        # parameters (the random initialisation of ViT-B/16's 86 M alone took seconds)
        ("vit_tiny_patch16_224", (2, 197, 192), None),
    ],
)
def test_split_matches_the_timm_model(
    name: str, fmap_shape: tuple[int, ...], small: int | None
) -> None:
    clf = load(f"timm:{name}", pretrained=False)
    assert isinstance(clf, TimmClassifier) and clf.spec == f"timm:{name}"
    assert clf.num_classes == 1000 and clf.class_names is None
    x_small = batch(small, n=2, seed=1) if small else None
    out = assert_classifier_consistent(clf, batch(224), clf.model, x_small)
    assert tuple(out["feature_map"].shape) == fmap_shape
    assert out["features"].shape == (2, clf.head_weight.shape[1])
    image = Image.new("RGB", (300, 260), (120, 30, 200))
    assert clf.transform(image).shape == (3, 224, 224)


def test_num_classes_and_local_weights(tmp_path: Path) -> None:
    clf = load("timm:resnet18", pretrained=False, num_classes=7)
    assert clf.num_classes == 7 and clf.head_weight.shape == (7, 512)
    torch.save({"state_dict": clf.model.state_dict()}, tmp_path / "ckpt.pth")
    from safetensors.torch import save_file

    save_file(clf.model.state_dict(), tmp_path / "ckpt.safetensors")
    for file in ("ckpt.pth", "ckpt.safetensors"):
        again = load("timm:resnet18", weights=tmp_path / file, num_classes=7)
        assert again.weights_digest() == clf.weights_digest()
        assert again.class_names is None
    with pytest.raises(ClassCountMismatchError, match="num_classes"):
        load("timm:resnet18", weights=tmp_path / "ckpt.pth")  # a 1000-class model


def test_offline_pretrained_weights_give_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(MissingDataError, match=r"weights=PATH.*pretrained=False"):
        load("timm:resnet18", pretrained=True)


def test_unknown_name_and_headless_model() -> None:
    with pytest.raises(UnknownNameError, match="resnet50") as err:
        load("timm:resnet5O", pretrained=False)
    assert err.value.close[0] == "resnet50" and len(err.value.close) == 5
    assert str(err.value).count("'") == 2 * (1 + 5)  # the unknown name and five suggestions
    with pytest.raises(InvalidInputError, match="no classifier head"):
        load("timm:resnet18", pretrained=False, num_classes=0)
