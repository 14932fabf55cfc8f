"""The shared adapter base: weights digest, head weight and bias."""

from __future__ import annotations

import torch
from torch import nn

from oodbench.models import load, wrap
from oodbench.models._adapter import state_dict_digest


def test_weights_digest_is_memoised_and_tracks_the_weights() -> None:
    a = load("timm:resnet18", pretrained=False, num_classes=3)
    b = load("timm:resnet18", pretrained=False, num_classes=3)
    digest = a.weights_digest()
    assert len(digest) == 64 and a._digest == digest and a.weights_digest() is digest
    assert b.weights_digest() != digest  # different random weights
    b.load_state_dict(a.state_dict())
    assert b.weights_digest() == digest  # load_state_dict forgets the memo
    with torch.no_grad():
        b.model.fc.bias[0] += 1.0
    assert state_dict_digest(b) != digest  # (in-place edits are not tracked by the memo)
    assert b.to(torch.float64).weights_digest() != digest  # dtype changes are
    c = load("timm:resnet18", pretrained=False, num_classes=3)
    c.load_state_dict(a.state_dict())
    c.to("cpu")
    assert c.weights_digest() == digest


def test_digest_covers_buffers() -> None:
    a = wrap(nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 2)), feature_layer=None, head_layer="1")
    before = a.weights_digest()
    a.module[0].running_mean += 1  # type: ignore[operator]
    assert state_dict_digest(a) != before


def test_head_weight_and_bias_are_detached_views() -> None:
    clf = load("timm:resnet18", pretrained=False, num_classes=3)
    assert not clf.head_weight.requires_grad and not clf.head_bias.requires_grad
    assert clf.head_weight.data_ptr() == clf.model.fc.weight.data_ptr()
