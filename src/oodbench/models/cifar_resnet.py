"""Residual networks for 32 px images (CIFAR-style), as :class:`Classifier` objects.

He, Zhang, Ren & Sun, "Deep Residual Learning for Image Recognition", CVPR 2016 (arXiv
1512.03385), Sec. 4.2: a 3x3 stem convolution, stages of basic blocks (two 3x3 conv-BN layers
and an identity shortcut; a strided 1x1 conv-BN projection where the shape changes), the first
stage at stride 1 and every later one halving the resolution, global average pooling and a
linear head::

    x (3, 32, 32) ─► conv3x3 stem ─► BN ─► ReLU ─► stage 1 ... stage S ─► feature map
                 ─► global average pool ─► features (widths[-1],) ─► linear head ─► logits

* ``resnet20``: widths (16, 32, 64), 3 blocks per stage, the paper's CIFAR-10 ResNet-20.
* ``resnet18``: widths (64, 128, 256, 512), 2 blocks per stage at strides 1, 2, 2, 2 with a
  3x3 stem and no max-pool: the CIFAR adaptation of ResNet-18 used by the OOD-training papers'
  CIFAR experiments (e.g. the ResNet-18 of OpenOOD v1.5's CIFAR benchmarks).
* any ``widths`` / ``blocks``: the CPU study uses a narrow, shallow member of the family.

The feature map is the last stage's output (ReLU, non-negative, as ReAct / ASH / DICE assume).
``spec`` is ``oodbench:cifar_resnet(...)`` with every argument, so two networks of different
shape never share a cache entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models._adapter import ModuleHeadClassifier

#: named members of the family: (widths, blocks per stage)
ARCHITECTURES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "resnet20": ((16, 32, 64), (3, 3, 3)),
    "resnet18": ((64, 128, 256, 512), (2, 2, 2, 2)),
}


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the shortcut, then ReLU (He et al. 2016, Fig. 2)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(ModuleHeadClassifier):
    """A ResNet for 32 px inputs (see the module docstring).

    Args:
        num_classes: outputs of the linear head.
        widths: channels of each stage (the first is also the stem's).
        blocks: basic blocks per stage (same length as ``widths``).
        seed: seed of the weight initialisation (does not touch the global RNG).
        transform: PIL image -> input tensor for :func:`oodbench.extract` (default: none set;
            the training recipe feeds tensors directly).
        class_names: optional names of the outputs.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        widths: Sequence[int] = (16, 32, 64),
        blocks: Sequence[int] = (3, 3, 3),
        seed: int = 0,
        transform: Callable[..., torch.Tensor] | None = None,
        class_names: Sequence[str] | None = None,
    ):
        widths, blocks = tuple(int(w) for w in widths), tuple(int(b) for b in blocks)
        if num_classes < 2:
            raise InvalidInputError(f"CifarResNet needs at least 2 classes; got {num_classes}")
        if not widths or len(widths) != len(blocks) or min(widths) < 1 or min(blocks) < 1:
            raise InvalidInputError(
                f"CifarResNet: widths {widths} and blocks {blocks} must be non-empty, of the same "
                "length, and positive"
            )
        super().__init__(
            spec=f"oodbench:cifar_resnet(num_classes={num_classes},widths={list(widths)},"
                 f"blocks={list(blocks)},seed={seed})",
            transform=transform or _no_transform, num_classes=num_classes,
            class_names=class_names)
        self.widths, self.blocks = widths, blocks
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, padding=1, bias=False),
                                      nn.BatchNorm2d(widths[0]), nn.ReLU())
            stages: list[nn.Module] = []
            c_in = widths[0]
            for i, (width, n) in enumerate(zip(widths, blocks)):
                stride = 1 if i == 0 else 2
                stages.append(nn.Sequential(*(BasicBlock(c_in if j == 0 else width, width,
                                                         stride if j == 0 else 1)
                                              for j in range(n))))
                c_in = width
            self.stages = nn.Sequential(*stages)
            self.fc = nn.Linear(widths[-1], num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        self.eval()

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return feature_map.mean(dim=(2, 3))

    def head_module(self) -> nn.Module:
        return self.fc


def cifar_resnet(name: str, num_classes: int, **options: object) -> CifarResNet:
    """A named member of :data:`ARCHITECTURES` (``UnknownNameError`` with the closest names)."""
    from oodbench.errors import UnknownNameError

    if name not in ARCHITECTURES:
        raise UnknownNameError("CIFAR ResNet", name, ARCHITECTURES)
    widths, blocks = ARCHITECTURES[name]
    return CifarResNet(num_classes, widths=widths, blocks=blocks, **options)  # type: ignore[arg-type]


def _no_transform(image: object) -> torch.Tensor:
    raise InvalidInputError(
        "this CifarResNet has no PIL transform: build it with transform=... (e.g. "
        "oodbench.train.tensor_images.eval_transform(mean, std)) to extract from image files"
    )
