"""ResNet-9: the network of the fast CIFAR-10 training recipes, as a :class:`Classifier`.

Page, "How to train your ResNet" (Myrtle.ai, 2018; the DAWNBench CIFAR-10 entry that reached
94 % test accuracy in 24 epochs, and the starting point of the later fast recipes such as
Keller Jordan's airbench): few layers, wide, and max-pooling instead of strided convolutions,
so that most of the work runs at low resolution::

    prep    conv3x3(3 -> w)   BN ReLU                                   32 x 32
    layer1  conv3x3(w -> 2w)  BN ReLU  max-pool 2   + residual(2w)       16 x 16
    layer2  conv3x3(2w -> 4w) BN ReLU  max-pool 2                         8 x 8
    layer3  conv3x3(4w -> 8w) BN ReLU  max-pool 2   + residual(8w)        4 x 4
    global max-pool -> features (8w,) -> linear head -> logits

with ``residual(c)(x) = x + ReLU(BN(conv3x3(ReLU(BN(conv3x3(x))))))``. Page's width is
``w = 64``; the CPU recipe of :mod:`oodbench.train.recipe` uses ``w = 16`` (16/32/64/128
channels, about 24 M multiply-adds per image, twice a ResNet-8's, with which it reaches a given
accuracy in far fewer epochs). Two departures from Page's network, both so that it is an
ordinary classifier: no fixed 0.125 scale on the logits (a loss's own settings, such as a
margin, then act on the logits it sees) and a bias in the head. The feature map is layer 3's
output (non-negative, as ReAct / ASH / DICE assume); the layers use PyTorch's default
initialisation, as Page's code does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models._adapter import ModuleHeadClassifier


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


class Residual(nn.Module):
    """``x + ReLU(BN(conv(ReLU(BN(conv(x))))))`` at constant width."""

    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn_relu(channels, channels),
                                  *_conv_bn_relu(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class CifarResNet9(ModuleHeadClassifier):
    """Page's ResNet-9 for 32 px inputs (see the module docstring).

    Args:
        num_classes: outputs of the linear head.
        width: channels of the first layer ``w``; the layers have w, 2w, 4w and 8w.
        seed: seed of the weight initialisation (does not touch the global RNG).
        transform: PIL image -> input tensor for :func:`oodbench.extract` (default: none set;
            the training recipe feeds tensors directly).
        class_names: optional names of the outputs.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        width: int = 16,
        seed: int = 0,
        transform: Callable[..., torch.Tensor] | None = None,
        class_names: Sequence[str] | None = None,
    ):
        if num_classes < 2 or int(width) < 1:
            raise InvalidInputError(
                f"CifarResNet9 needs at least 2 classes and a positive width; got "
                f"{num_classes} classes, width {width}")
        from oodbench.models.cifar_resnet import _no_transform

        w = int(width)
        super().__init__(
            spec=f"oodbench:cifar_resnet9(num_classes={num_classes},width={w},seed={seed})",
            transform=transform or _no_transform, num_classes=num_classes,
            class_names=class_names)
        self.width = w
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.layers = nn.Sequential(
                *_conv_bn_relu(3, w),
                *_conv_bn_relu(w, 2 * w), nn.MaxPool2d(2), Residual(2 * w),
                *_conv_bn_relu(2 * w, 4 * w), nn.MaxPool2d(2),
                *_conv_bn_relu(4 * w, 8 * w), nn.MaxPool2d(2), Residual(8 * w))
            self.fc = nn.Linear(8 * w, num_classes)
        self.eval()

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return feature_map.amax(dim=(2, 3))

    def head_module(self) -> nn.Module:
        return self.fc
