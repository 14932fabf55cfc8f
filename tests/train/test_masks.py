"""Top-k weight masks (UMAP, edge-popup) against the official GetSubnet computation, the
straight-through gradient, baking, and the one-line errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.train import masks


def _official_subnet(scores: torch.Tensor, k: float) -> torch.Tensor:
    """utils/conv_type.py GetSubnet.forward on |scores|: the lowest int((1 - k) n) go to 0."""
    out = scores.abs().clone()
    _, idx = out.flatten().sort()
    j = int((1 - k) * out.numel())
    flat = out.flatten()
    flat[idx[:j]] = 0
    flat[idx[j:]] = 1
    return flat.view_as(scores)


@pytest.mark.parametrize("keep", [0.8, 0.965, 1.0, 0.05])
def test_mask_matches_official_and_keeps_the_fraction(keep):
    scores = torch.randn(16, 8, 3, 3, generator=torch.Generator().manual_seed(0))
    mask = masks.top_k_mask(scores, keep)
    torch.testing.assert_close(mask, _official_subnet(scores, keep))  # 0/1 by ranking: exact
    assert int(mask.sum()) == scores.numel() - int((1 - keep) * scores.numel())


def test_straight_through_gradient():
    conv = nn.Conv2d(3, 4, 3)
    (mask,) = masks.attach([conv], 0.8, seed=0, who="test")
    x = torch.randn(2, 3, 6, 6)
    w = conv.parametrizations.weight.original
    m = masks.top_k_mask(mask.scores.detach(), 0.8)
    used = (w.detach() * m).requires_grad_(True)
    torch.nn.functional.conv2d(x, used, conv.bias).square().sum().backward()
    conv(x).square().sum().backward()
    expected = torch.sign(mask.scores.detach()) * used.grad * w.detach()
    torch.testing.assert_close(mask.scores.grad, expected)  # one float32 conv gradient, twice


def test_bake_and_plain_state_dict():
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(3))
    net(torch.zeros(1, 1, 5, 5))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    found = masks.attach([net], 0.5, seed=1, who="test")
    assert len(found) == 2  # the conv and the linear layer, not the BatchNorm
    plain = masks.plain_state_dict(net)
    assert plain.keys() == before.keys()
    expected0 = before["0.weight"] * masks.top_k_mask(found[0].scores, 0.5)
    torch.testing.assert_close(plain["0.weight"], expected0)  # products with 0/1: exact
    assert torch.equal(plain["1.weight"], before["1.weight"])
    masks.bake(net)
    assert set(net.state_dict()) == set(before)
    assert torch.equal(net.state_dict()["0.weight"], plain["0.weight"])


def test_same_seed_same_masks_on_every_rank():
    a, b = nn.Linear(20, 10), nn.Linear(20, 10)
    ma, mb = masks.attach([a], 0.8, 7, "t")[0], masks.attach([b], 0.8, 7, "t")[0]
    assert torch.equal(ma.scores, mb.scores)
    assert not torch.equal(ma.scores, masks.attach([nn.Linear(20, 10)], 0.8, 8, "t")[0].scores)


def test_errors():
    weight_normed = nn.utils.parametrizations.weight_norm(nn.Linear(4, 2))
    with pytest.raises(InvalidInputError, match="no convolution or linear layer to mask") as err:
        masks.attach([nn.Sequential(nn.ReLU(), weight_normed)], 0.8, 0, "loss 'umap'")
    assert "\n" not in str(err.value)
    for keep in (0.0, 1.2, -1):
        with pytest.raises(InvalidInputError, match=r"must lie in \(0, 1\]"):
            masks.attach([nn.Linear(3, 2)], keep, 0, "loss 'umap'")


@pytest.mark.parametrize("shape", [(16, 8, 3, 3), (10, 20), (4, 3, 5)])
def test_scores_start_as_the_official_kaiming_uniform(shape):
    """The official SubnetConv / SubnetLinear initialise their scores with
    ``nn.init.kaiming_uniform_(self.scores, a=math.sqrt(5))`` (tmlr-group/Unleashing-Mask
    @ 1640ce6, utils/conv_type.py:36, utils/linear_type.py:20; mode fan_in, the default): with
    the same generator the scores are that draw. The bound ``gain * sqrt(3 / fan_in)``,
    ``gain = sqrt(2 / (1 + 5))``, is ``1 / sqrt(fan_in)`` up to the last bit of a float64, so the
    uniform draws agree to float32 rounding (rtol 1e-6)."""
    official = torch.empty(shape)
    nn.init.kaiming_uniform_(official, a=math.sqrt(5), generator=torch.Generator().manual_seed(3))
    ours = masks.WeightMask(torch.Size(shape), 0.8, torch.Generator().manual_seed(3)).scores
    torch.testing.assert_close(ours.detach(), official, rtol=1e-6, atol=0)
