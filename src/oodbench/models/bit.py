"""BiT (Big Transfer) ResNet-v2 as :class:`Classifier` (spec ``bit:<model>``, e.g.
``bit:BiT-S-R101x1``), reading the checkpoints of the BiT PyTorch code that the OOD papers on BiT
fine-tune and release: MOS (deeplearning-wisc/large_scale_ood), GradNorm
(deeplearning-wisc/gradnorm_ood), RankFeat (KingJamesSong/RankFeat), all with the same
``resnetv2.py``.

The official module (gradnorm_ood ``resnetv2.py`` at 18d5d33; large_scale_ood's at af75ddd adds
only block freezing), the facts this family follows:

- ``StdConv2d``: each output channel's weight standardised, ``(w - mean) / sqrt(var + 1e-10)``
  with the biased variance (:10-17);
- ``root``: ``conv`` 7x7 / 2, padding 3, no bias; ``pad`` ConstantPad2d(1, 0); ``pool``
  MaxPool2d(3, 2, padding 0) (:102-108);
- ``body.block1..4.unit01..``: pre-activation bottlenecks ``gn1 conv1 gn2 conv2 gn3 conv3``,
  GroupNorm(32), the stride on the 3x3 ``conv2``, ``downsample`` a 1x1 StdConv2d of the
  pre-activated input where the stride or width changes (:37-76, :110-131);
- ``before_head``: ``gn`` GroupNorm(32), ReLU, global average pool (:135-139); ``head.conv``: a
  1x1 Conv2d with bias, ``head_size`` outputs (:141-143); logits ``x[..., 0, 0]`` (:182-185);
- ``KNOWN_MODELS`` (:213-226): R50 = [3, 4, 6, 3], R101 = [3, 4, 23, 3], R152 = [3, 8, 36, 3]
  blocks, width factor ``xN``; BiT-S and BiT-M differ only in their pre-training data;
- checkpoints: ``{"step", "model": the DataParallel state dict ("module." prefix), "optim"}``
  (large_scale_ood finetune.py:313-326), read as ``state_dict["model"]`` with ``module.``
  stripped (gradnorm_ood test_ood.py:227-230, resnetv2.py:187-191); ``head_size`` is the number
  of ID classes, 1000 (test_ood.py:227), or 1000 + 8 for MOS's group-softmax head (one
  "others" output per group: large_scale_ood test_mos.py:79-89 and
  group_config/taxonomy_level0.npy, 8 groups of 398, 521, 9, 7, 52, 8, 3, 2 classes).

oodbench builds the network from timm's ``ResNetV2`` (the same pre-activation blocks, its
``StdConv2d`` given the official eps 1e-10) and a linear head; :func:`official_key` gives each
tensor's official name. Split: feature map = ``block4``'s output (before ``before_head``: the
map RankFeat edits, RankFeat test_ood_resnetv2.py ``intermediate_forward(..., layer_index=4)``
then ``head(before_head(feat))``); ``pool`` = GroupNorm, ReLU, mean (``before_head``);
``head`` = Linear (the 1x1 head convolution's weight as (C, D)). Preprocessing: the official
evaluation transform, ``Resize((480, 480))`` bilinear, no crop, mean = std = 0.5
(gradnorm_ood test_ood.py:19-24).

No weights are bundled or downloaded: pass ``weights=`` the released checkpoint (e.g.
``BiT-S-R101x1-flat-finetune.pth.tar``, gradnorm_ood README.md:53).
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import Any

import torch
from torch import nn

from oodbench.errors import UnknownNameError
from oodbench.models._adapter import ModuleHeadClassifier
from oodbench.models.checkpoint import load_renamed, read_state_dict, require_weights
from oodbench.models.classifier import in_imagenet1k_order
from oodbench.models.preprocessing import square_resize

#: blocks per stage of each depth (official resnetv2.py:213-226)
DEPTHS = {"R50": (3, 4, 6, 3), "R101": (3, 4, 23, 3), "R152": (3, 8, 36, 3)}
#: the official KNOWN_MODELS names -> (blocks per stage, width factor)
VARIANTS: dict[str, tuple[tuple[int, ...], int]] = {
    f"BiT-{data}-{depth}x{width}": (DEPTHS[depth], width)
    for data in ("M", "S")
    for depth, width in (("R50", 1), ("R50", 3), ("R101", 1), ("R101", 3), ("R152", 2),
                         ("R152", 4))
}
#: the official StdConv2d's eps (resnetv2.py:15)
STD_CONV_EPS = 1e-10
#: the official evaluation transform (gradnorm_ood test_ood.py:19-24): Resize((480, 480)),
#: torchvision's bilinear default, no crop, Normalize((0.5,) * 3, (0.5,) * 3)
PREPROCESSING: dict[str, Any] = {"resize": [480, 480], "crop_fraction": 1.0, "interpolation": "bilinear",
                 "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}

_STAGE = re.compile(r"model\.stages\.(\d+)\.blocks\.(\d+)\.(.+)")
_UNIT_PARTS = {"norm1": "gn1", "norm2": "gn2", "norm3": "gn3", "downsample.conv": "downsample"}


def official_key(key: str) -> str:
    """The official ``resnetv2.py`` name of a key of :class:`BitClassifier`'s state dict
    (``model.stages.2.blocks.22.norm1.weight`` -> ``body.block3.unit23.gn1.weight``)."""
    if key.startswith("model.stem.conv."):
        return "root.conv." + key.removeprefix("model.stem.conv.")
    if key.startswith("model.norm."):
        return "before_head.gn." + key.removeprefix("model.norm.")
    if key.startswith("fc."):
        return "head.conv." + key.removeprefix("fc.")
    match = _STAGE.fullmatch(key)
    if match is None:
        raise ValueError(f"no official BiT name for {key!r}")
    stage, block, rest = int(match[1]), int(match[2]), match[3]
    part, _, param = rest.rpartition(".")
    return f"body.block{stage + 1}.unit{block + 1:02d}.{_UNIT_PARTS.get(part, part)}.{param}"


class BitClassifier(ModuleHeadClassifier):
    """timm's ResNetV2 trunk with the official BiT split (module docstring) and a linear head."""

    def __init__(self, name: str, num_classes: int):
        from timm.layers import StdConv2d
        from timm.models.resnetv2 import ResNetV2

        layers, width = VARIANTS[name]
        super().__init__(spec=f"bit:{name}", transform=square_resize(PREPROCESSING),
                         num_classes=num_classes, class_names=None)
        self.model = ResNetV2(list(layers), width_factor=width, num_classes=0, stem_type="fixed",
                              conv_layer=partial(StdConv2d, eps=STD_CONV_EPS))
        self.fc = nn.Linear(self.model.num_features, num_classes)
        self.eval()

    def head_module(self) -> nn.Module:
        return self.fc

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.stages(self.model.stem(x))  # type: ignore[no-any-return]

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return self.model.norm(feature_map).mean(dim=(2, 3))  # type: ignore[no-any-return]


def load_bit(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
) -> BitClassifier:
    """Loader of the ``bit:`` family (see :func:`oodbench.models.load`).

    ``weights=PATH``: a checkpoint in the official layout (module docstring), loaded strictly;
    ``pretrained=False``: random weights. ``num_classes`` (default 1000) is the head's size:
    1008 for MOS's group-softmax checkpoint.
    """
    if name not in VARIANTS:
        raise UnknownNameError("BiT model", name, VARIANTS)
    require_weights(f"bit:{name}", weights, pretrained, "BiT",
                    "a checkpoint of the official BiT PyTorch code (e.g. BiT-S-R101x1-flat-"
                    "finetune.pth.tar, linked in deeplearning-wisc/gradnorm_ood README.md)")
    classifier = BitClassifier(name, 1000 if num_classes is None else num_classes)
    if weights is not None:
        load_official(classifier, weights)
    in_imagenet1k_order(classifier)  # the official ImageFolder order: sorted wnids
    return classifier


def load_official(classifier: BitClassifier, weights: str | os.PathLike[str]) -> None:
    """Read ``weights`` (official layout) into ``classifier``, every tensor by its official name."""
    expected = {official_key(k): k for k in classifier.state_dict()}
    load_renamed(classifier, read_state_dict(weights), expected, repr(os.fspath(weights)),
                 f"official BiT ({classifier.spec})", head=("head.conv.weight", "head.conv.bias"))
