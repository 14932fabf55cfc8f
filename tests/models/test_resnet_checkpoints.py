"""The ``supcon:`` (knn-ood's SupConResNet) and ``mmcls:`` (class_prior's mmclassification
ResNet) families read checkpoints written here in each official key layout from a re-statement
of the official networks with random values: every tensor lands where the official forward uses
it, and wrong checkpoints are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from oodbench.errors import ClassCountMismatchError, InvalidInputError, MissingDataError
from oodbench.models import load
from oodbench.models.mmcls import mmcls_key
from tests.models.official_nets import ResNet, SupCon, randomise

R50, R101 = (3, 4, 6, 3), (3, 4, 23, 3)


def _x() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1),
                       dtype=torch.float64)


def _close(got: torch.Tensor, ref: torch.Tensor) -> None:
    # float64 through ~50 layers: ~1e-14 of the scale; 1e-10 is slack for rounding and far
    # below the order-1 change a misplaced tensor makes
    assert (got - ref).abs().max() <= 1e-10 * ref.abs().max()


def _supcon_file(net: SupCon, path: Path, drop: str = "") -> Path:
    """knn-ood's supcon.pth: {"model": the DataParallel state dict ("module." prefix)}."""
    state = {f"module.{k}": v for k, v in net.state_dict().items() if not (drop and
                                                                          k.startswith(drop))}
    torch.save({"model": state, "epoch": 700}, path)
    return path


def test_supcon_encoder_fc_and_statistics_land_where_knn_ood_uses_them(tmp_path: Path) -> None:
    official = randomise(SupCon(R50, 1000), seed=0)
    clf = load("supcon:resnet50", weights=_supcon_file(official, tmp_path / "supcon.pth"))
    loaded = clf.model.state_dict()
    for key, value in official.state_dict().items():
        if key.startswith("head."):  # the projection MLP: no detector reads it
            continue
        assert torch.equal(loaded[key.removeprefix("encoder.")], value), key
    official, clf = official.double(), clf.double()
    with torch.no_grad():
        features = official.encoder.features(_x())  # feat_extract_largescale.py:55-61
        got = clf.forward_all(_x())
    _close(got["features"], features)
    _close(got["logits"], official.fc(features))
    assert clf.transform.transforms[0].size == 256 and clf.transform.transforms[1].size == (224, 224)


def test_supcon_without_fc_keeps_a_random_head_and_warns(tmp_path: Path) -> None:
    official = randomise(SupCon(R50, 1000), seed=1)
    path = _supcon_file(official, tmp_path / "supcon.pth", drop="fc.")
    with pytest.warns(UserWarning, match="has no fc"):
        clf = load("supcon:resnet50", weights=path)
    loaded = clf.model.state_dict()
    for key, value in official.encoder.state_dict().items():
        assert torch.equal(loaded[key], value), key


def test_supcon_missing_encoder_tensor_is_named(tmp_path: Path) -> None:
    path = _supcon_file(randomise(SupCon(R50, 1000), seed=2), tmp_path / "supcon.pth",
                        drop="encoder.layer4.2.bn3")
    with pytest.raises(InvalidInputError, match=r"knn-ood SupConResNet.*missing: "
                                                r"encoder\.layer4\.2\.bn3\.weight"):
        load("supcon:resnet50", weights=path)


def _mmcls_file(net: ResNet, path: Path) -> Path:
    """An mmclassification checkpoint: {"meta": ..., "state_dict": backbone.* and head.fc.*}."""
    state = {("head." if k.startswith("fc.") else "backbone.") + k: v
             for k, v in net.state_dict().items()}
    torch.save({"meta": {"CLASSES": ["tench", "goldfish"], "epoch": 90}, "state_dict": state},
               path)
    return path


def test_mmcls_checkpoint_lands_where_class_prior_uses_it(tmp_path: Path) -> None:
    official = randomise(ResNet(R50, 1000), seed=3)
    clf = load("mmcls:resnet50", weights=_mmcls_file(official, tmp_path / "resnet50.pth"))
    loaded = clf.model.state_dict()
    assert loaded.keys() == official.state_dict().keys()  # class_prior: first dotted part dropped
    for key, value in official.state_dict().items():
        assert torch.equal(loaded[key], value), key
    official, clf = official.double(), clf.double()
    with torch.no_grad():
        features = official.features(_x())
        got = clf.forward_all(_x())
    _close(got["features"], features)
    _close(got["logits"], official.fc(features))


def test_mmcls_resnet101_has_exactly_class_priors_keys_and_shapes() -> None:
    with torch.device("meta"):
        official = {("head." if k.startswith("fc.") else "backbone.") + k: tuple(v.shape)
                    for k, v in ResNet(R101, 1000).state_dict().items()}
    clf = load("mmcls:resnet101", pretrained=False)
    assert {mmcls_key(k): tuple(v.shape) for k, v in clf.model.state_dict().items()} == official
    resize = clf.transform.transforms[0]
    assert resize.size == [480, 480] or tuple(resize.size) == (480, 480)


def test_mmcls_wrong_head_and_wrong_layout_are_named(tmp_path: Path) -> None:
    path = _mmcls_file(randomise(ResNet(R50, 10), seed=4), tmp_path / "lt.pth")
    with pytest.raises(ClassCountMismatchError, match="pass num_classes=10"):
        load("mmcls:resnet50", weights=path)
    plain = tmp_path / "plain.pth"
    torch.save({"state_dict": randomise(ResNet(R50, 1000), seed=5).state_dict()}, plain)
    with pytest.raises(InvalidInputError, match=r"mmclassification ResNet.*unexpected: "
                                                r"conv1\.weight"):
        load("mmcls:resnet50", weights=plain)
    with pytest.raises(MissingDataError, match="weights=PATH"):
        load("mmcls:resnet101")


@pytest.mark.parametrize(("spec", "module"), [("bit:BiT-S-R50x1", "bit"),
                                              ("supcon:resnet50", "supcon"),
                                              ("mmcls:resnet50", "mmcls")])
def test_the_transform_is_the_declared_official_preprocessing(spec: str, module: str) -> None:
    """The family's ``PREPROCESSING`` (what ``reproduce`` compares with the recipe) is what its
    transform does: the Resize size and interpolation, the crop (none: 1.0), mean and std."""
    import importlib

    from PIL import Image
    from torchvision import transforms as T

    declared = importlib.import_module(f"oodbench.models.{module}").PREPROCESSING
    transform = load(spec, pretrained=False).transform
    steps = transform.transforms
    (resize,) = [t for t in steps if isinstance(t, T.Resize)]
    (normalize,) = [t for t in steps if isinstance(t, T.Normalize)]
    crops = [t for t in steps if isinstance(t, T.CenterCrop)]
    assert (resize.size if isinstance(resize.size, int) else list(resize.size)) == \
        declared["resize"]
    assert resize.interpolation.value == declared["interpolation"]
    assert list(normalize.mean) == declared["mean"] and list(normalize.std) == declared["std"]
    side = declared["resize"] if isinstance(declared["resize"], int) else declared["resize"][0]
    crop = crops[0].size[0] / side if crops else 1.0
    assert crop == declared["crop_fraction"]
    image = Image.new("L", (300, 200))  # grey, not square: made RGB and sized as declared
    assert tuple(transform(image).shape) == (
        3, int(side * crop), int(side * crop))
