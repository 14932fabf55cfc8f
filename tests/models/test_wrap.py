"""wrap(): any nn.Module as a Classifier, split by hooks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torchvision import models as tv

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.models import wrap
from oodbench.models.torchvision_models import TorchvisionClassifier
from tests.models.checks import assert_classifier_consistent, batch


def test_wrapped_resnet_equals_the_torchvision_adapter() -> None:
    torch.manual_seed(0)
    net = tv.resnet18(num_classes=6).eval()
    clf = wrap(net, feature_layer="layer4", head_layer="fc")
    assert clf.spec == "module:ResNet" and clf.num_classes == 6 and not clf.training
    x = batch(64)
    out = assert_classifier_consistent(clf, x, net)
    ref = TorchvisionClassifier(net, spec="tv", transform=lambda i: i).forward_all(
        x, ("logits", "features", "feature_map")
    )
    for key in ref:
        torch.testing.assert_close(out[key], ref[key])
    assert clf.transform(Image.new("RGB", (320, 240))).shape == (3, 224, 224)


class InplaceAfterFeatures(nn.Module):
    """conv -> (feature map) -> in-place ReLU -> max-pool -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.body(x)
        F.relu_(f)
        return self.fc(torch.amax(f, dim=(2, 3)))


def test_pool_is_checked_and_can_be_given() -> None:
    torch.manual_seed(0)
    net = InplaceAfterFeatures().eval()
    x = batch(16)
    with pytest.raises(InvalidInputError, match="pool="):
        wrap(net, feature_layer="body", head_layer="fc").forward_all(x)
    clf = wrap(net, feature_layer="body", head_layer="fc", pool=lambda f: f.relu().amax(dim=(2, 3)))
    out = assert_classifier_consistent(clf, x, net)
    assert out["feature_map"].min() < 0  # captured before the in-place ReLU modified it
    assert not clf.head_bias.any() and clf.head_bias.shape == (4,)


def test_without_feature_layer_and_with_a_non_linear_head() -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 10), nn.ReLU(), nn.Linear(10, 3)).eval()
    clf = wrap(mlp, feature_layer=None, head_layer="3", transform=lambda im: im)
    out = assert_classifier_consistent(clf, batch(4), mlp)
    assert torch.equal(out["feature_map"], out["features"]) and out["features"].shape == (2, 10)

    conv_head = nn.Sequential(nn.Conv2d(3, 5, 1), nn.Flatten()).eval()
    with pytest.raises(InvalidInputError, match="num_classes="):
        wrap(conv_head, feature_layer=None, head_layer="0")
    odd = wrap(conv_head, feature_layer=None, head_layer="0", num_classes=5)
    with pytest.raises(InvalidInputError, match="not nn.Linear"):
        _ = odd.head_weight


def test_bad_layer_names_and_token_maps() -> None:
    net = tv.resnet18().eval()
    with pytest.raises(UnknownNameError, match="layer4"):
        wrap(net, feature_layer="layer5", head_layer="fc")
    with pytest.raises(UnknownNameError):
        wrap(net, feature_layer="layer4", head_layer="")
    from oodbench.models.wrapping import global_average_pool

    with pytest.raises(InvalidInputError, match="pool="):
        global_average_pool(torch.zeros(2, 5, 8))


def test_a_layer_that_never_runs_is_reported() -> None:
    net = tv.resnet18(num_classes=3).eval()
    net.unused = nn.Identity()  # registered, but forward() never calls it
    for kwargs in ({"feature_layer": "unused", "head_layer": "fc"},
                   {"feature_layer": "layer4", "head_layer": "unused", "num_classes": 3}):  # fmt: skip
        clf = wrap(net, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="did not run"):
            clf.forward_all(batch(32, n=1))
    with pytest.raises(InvalidInputError, match="did not run"):
        wrap(net, feature_layer="unused", head_layer="fc").feature_map(batch(32, n=1))
