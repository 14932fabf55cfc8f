"""mmclassification ResNets as :class:`Classifier` (spec ``mmcls:<arch>``, e.g.
``mmcls:resnet101``), reading checkpoints as the class-prior code does (Jiang et al., ICML 2023,
"Detecting out-of-distribution data through in-distribution class prior"; its ResNet-101 was
trained with mmclassification on ImageNet-LT-a8, XueJiang16/class_prior README.md:40-42).

The official loading (XueJiang16/class_prior ``test_ood.py`` at dc1eb9c, :268-279), the facts
this family follows: the network is ``resnet.resnet50/101/152()`` chosen by the checkpoint's
file name, ``ResNetCustom`` with 1000 outputs (``resnet.py``:123-165, 284-293), whose layers
are torchvision's by name and shape (``conv1 bn1 relu maxpool layer1..4 avgpool fc``, Bottleneck
with the stride on ``conv2``, ``downsample`` = Sequential(1x1 conv, BatchNorm)); the
checkpoint's ``state_dict`` has mmcls's module prefixes (``backbone.conv1.weight``,
``head.fc.weight``), and the code drops the first dotted part of every key before a strict
``load_state_dict``. Preprocessing: ``Resize((480, 480))`` (both sides, bilinear, no crop),
mean ``[123.675, 116.28, 103.53] / 255``, std ``[58.395, 57.12, 57.375] / 255``
(test_ood.py:86-92).

oodbench builds torchvision's ResNet and maps ``backbone.<name>`` onto ``<name>`` and
``head.fc.*`` onto ``fc.*`` (the official rule, with the prefixes checked so that a checkpoint
of another layout is named as such).
"""

from __future__ import annotations

import os
from typing import Any

from oodbench.errors import UnknownNameError
from oodbench.models.checkpoint import load_renamed, read_state_dict, require_weights
from oodbench.models.classifier import in_imagenet1k_order
from oodbench.models.preprocessing import square_resize
from oodbench.models.torchvision_models import TorchvisionClassifier

#: the architectures class_prior's test_ood.py builds (:268-273)
ARCHITECTURES = ("resnet50", "resnet101", "resnet152")
#: the official evaluation transform (test_ood.py:86-92): Resize((480, 480)), torchvision's
#: bilinear default, no crop, mmcls's 0-255 mean and std divided by 255
PREPROCESSING: dict[str, Any] = {"resize": [480, 480], "crop_fraction": 1.0, "interpolation": "bilinear",
                 "mean": [123.675 / 255, 116.28 / 255, 103.53 / 255],
                 "std": [58.395 / 255, 57.12 / 255, 57.375 / 255]}


def mmcls_key(key: str) -> str:
    """The mmclassification name of a torchvision ResNet key (``layer1.0.conv1.weight`` ->
    ``backbone.layer1.0.conv1.weight``, ``fc.bias`` -> ``head.fc.bias``)."""
    return ("head." if key.startswith("fc.") else "backbone.") + key


def load_mmcls(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
) -> TorchvisionClassifier:
    """Loader of the ``mmcls:`` family (see :func:`oodbench.models.load`): ``weights=PATH`` in
    mmclassification's layout (module docstring), or ``pretrained=False`` for random weights."""
    from torchvision import models as tv

    if name not in ARCHITECTURES:
        raise UnknownNameError("mmclassification ResNet", name, ARCHITECTURES)
    require_weights(f"mmcls:{name}", weights, pretrained, "mmclassification",
                    "an mmclassification checkpoint (e.g. class_prior's "
                    "checkpoints/resnet101.pth)")
    model = tv.get_model(name, weights=None, num_classes=1000 if num_classes is None
                         else num_classes)
    if weights is not None:
        expected = {mmcls_key(k): k for k in model.state_dict()}
        load_renamed(model, read_state_dict(weights), expected, repr(os.fspath(weights)),
                     "mmclassification ResNet", optional=(), head=("head.fc.weight",
                                                               "head.fc.bias"))
    classifier = TorchvisionClassifier(model, spec=f"mmcls:{name}",
                                       transform=square_resize(PREPROCESSING))
    in_imagenet1k_order(classifier)  # ImageNet's label order (class_prior meta/*.txt)
    return classifier
