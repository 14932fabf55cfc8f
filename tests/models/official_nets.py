"""Re-statements of the official networks whose checkpoints oodbench's model families read,
written from the facts the families' docstrings cite (module names, shapes, forward), so a
checkpoint can be written in each official key layout with random values and the loaded model
compared with the official forward.

- :class:`BiT`: deeplearning-wisc/gradnorm_ood ``resnetv2.py`` (``root``, ``body.blockN.unitNN``
  pre-activation bottlenecks with weight-standardised convolutions, ``before_head``, ``head``);
- :class:`ResNet`: the bottleneck ResNet of knn-ood ``models/resnet_supcon.py`` (the SupCon
  ``encoder``, no ``fc``) and of class_prior ``resnet.py`` (``ResNetCustom``, with ``fc``).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn


class StdConv(nn.Conv2d):
    """A convolution of the per-output-channel standardised weight, (w - mean) / sqrt(var + 1e-10),
    biased variance."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var, mean = torch.var_mean(self.weight, dim=(1, 2, 3), keepdim=True, unbiased=False)
        weight = (self.weight - mean) / torch.sqrt(var + 1e-10)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class PreAct(nn.Module):
    """gn1 -> relu -> (downsample) ; conv1 ; gn2 relu conv2 (stride) ; gn3 relu conv3 ; + residual."""

    def __init__(self, cin: int, cout: int, cmid: int, stride: int = 1):
        super().__init__()
        self.gn1, self.conv1 = nn.GroupNorm(32, cin), StdConv(cin, cmid, 1, bias=False)
        self.gn2 = nn.GroupNorm(32, cmid)
        self.conv2 = StdConv(cmid, cmid, 3, stride=stride, padding=1, bias=False)
        self.gn3, self.conv3 = nn.GroupNorm(32, cmid), StdConv(cmid, cout, 1, bias=False)
        if stride != 1 or cin != cout:
            self.downsample = StdConv(cin, cout, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.gn1(x))
        residual = self.downsample(pre) if hasattr(self, "downsample") else x
        out = self.conv1(pre)
        out = self.conv2(F.relu(self.gn2(out)))
        return self.conv3(F.relu(self.gn3(out))) + residual


class BiT(nn.Module):
    """The official BiT ResNet-v2 (``KNOWN_MODELS[name](head_size=...)``)."""

    def __init__(self, units: tuple[int, ...], wf: int, head_size: int):
        super().__init__()
        self.root = nn.Sequential(OrderedDict(
            conv=StdConv(3, 64 * wf, 7, stride=2, padding=3, bias=False),
            pad=nn.ConstantPad2d(1, 0), pool=nn.MaxPool2d(3, stride=2, padding=0)))
        blocks, cin = OrderedDict(), 64 * wf
        for b, (n, mid) in enumerate(zip(units, (64, 128, 256, 512))):
            cout = mid * 4 * wf
            blocks[f"block{b + 1}"] = nn.Sequential(OrderedDict(
                (f"unit{u + 1:02d}", PreAct(cin if u == 0 else cout, cout, mid * wf,
                                            2 if u == 0 and b > 0 else 1)) for u in range(n)))
            cin = cout
        self.body = nn.Sequential(blocks)
        self.before_head = nn.Sequential(OrderedDict(
            gn=nn.GroupNorm(32, 2048 * wf), relu=nn.ReLU(), avg=nn.AdaptiveAvgPool2d(1)))
        self.head = nn.Sequential(OrderedDict(conv=nn.Conv2d(2048 * wf, head_size, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.before_head(self.body(self.root(x))))[..., 0, 0]


class Bottleneck(nn.Module):
    """conv1 bn1 relu conv2 (stride) bn2 relu conv3 bn3, + (downsample(x) or x), relu."""

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride=stride, bias=False),
                                         nn.BatchNorm2d(planes * 4))
                           if stride != 1 or cin != planes * 4 else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """conv1 7x7/2 bn1 relu maxpool 3/2, layer1..4, average pool, flatten (and ``fc`` when
    ``num_classes`` is given)."""

    def __init__(self, layers: tuple[int, ...], num_classes: int | None):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1, self.maxpool = nn.BatchNorm2d(64), nn.MaxPool2d(3, stride=2, padding=1)
        cin = 64
        for i, (n, planes) in enumerate(zip(layers, (64, 128, 256, 512))):
            blocks = []
            for u in range(n):
                blocks.append(Bottleneck(cin, planes, 2 if u == 0 and i > 0 else 1))
                cin = planes * 4
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        if num_classes is not None:
            self.fc = nn.Linear(2048, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return torch.flatten(self.avgpool(x), 1)


class SupCon(nn.Module):
    """``encoder`` (a :class:`ResNet` without fc), ``fc``, and the projection MLP ``head``."""

    def __init__(self, layers: tuple[int, ...], num_classes: int):
        super().__init__()
        self.encoder = ResNet(layers, None)
        self.fc = nn.Linear(2048, num_classes)
        self.head = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 128))


def randomise(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter and float buffer (BatchNorm statistics too) set to seeded random values,
    in eval mode: normalisation scales near 1 and variances positive, so activations stay finite."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if not tensor.is_floating_point():
                continue
            noise = torch.randn(tensor.shape, generator=gen)
            if name.endswith("running_var"):
                tensor.copy_(0.5 + noise.abs())
            elif tensor.ndim == 1 and (name.endswith("weight")):
                tensor.copy_(1 + 0.1 * noise)
            elif tensor.ndim == 1:
                tensor.copy_(0.1 * noise)
            else:
                fan_in = tensor[0].numel()
                tensor.copy_(noise * (2 / fan_in) ** 0.5)
    return module.eval()
