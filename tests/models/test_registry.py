"""Model specs: parsing, the family registry, describe_specs, device placement."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.models import FAMILIES, Classifier, ModelFamily, describe_specs, load, wrap
from oodbench.models._adapter import resolve_device
from oodbench.models.registry import parse_spec


def toy_loader(
    name: str, *, pretrained: bool = True, weights: object = None, width: int = 3
) -> Classifier:
    """A loader as another family would register it (used through the registry below)."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, width))
    return wrap(net, feature_layer=None, head_layer="1", spec=f"toy:{name}", transform=lambda i: i)


def test_parse_spec() -> None:
    assert parse_spec("timm:resnet50")[::2] == ("timm", "resnet50")
    assert (
        parse_spec("timm:vit_base_patch16_224.augreg_in21k")[2]
        == "vit_base_patch16_224.augreg_in21k"
    )
    assert parse_spec("efficientnet_lite0")[::2] == ("efficientnet_lite0", "efficientnet_lite0")
    with pytest.raises(UnknownNameError, match="Did you mean 'timm'"):
        parse_spec("tim:resnet50")
    with pytest.raises(InvalidInputError, match="timm:<name>"):
        parse_spec("timm:")
    with pytest.raises(InvalidInputError, match="takes no name"):
        parse_spec("efficientnet_lite0:x")


def test_a_new_family_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        FAMILIES, "toy", ModelFamily("tests.models.test_registry:toy_loader", "toy:<name>", "toys")
    )
    clf = load("toy:abc", width=5, device="cpu")
    assert clf.spec == "toy:abc" and clf.num_classes == 5 and not clf.training
    assert "toy:<name>" in describe_specs()
    with pytest.raises(InvalidInputError, match="colour"):
        load("toy:abc", colour="red")


def test_describe_specs_lists_every_family() -> None:
    text = describe_specs()
    for family in FAMILIES.values():
        assert family.syntax in text
    assert "wrap(" in text


def test_device_placement_and_eval_mode() -> None:
    clf = load("timm:resnet18", pretrained=False, num_classes=3, device="auto")
    assert clf.head_weight.device.type == resolve_device("auto").type
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu") or (
        torch.backends.mps.is_available()
    )
    assert not clf.training and not any(m.training for m in clf.modules())
