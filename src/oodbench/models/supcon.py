"""The SupCon ResNet of the KNN paper as :class:`Classifier` (spec ``supcon:resnet50``), reading
checkpoints in the layout of deeplearning-wisc/knn-ood (Sun et al., ICML 2022, "Out-of-distribution
detection with deep nearest neighbors").

The official module (knn-ood ``models/resnet_supcon.py`` at 2afb2bb), the facts this family
follows:

- ``SupConResNet`` (:220-237): ``encoder`` = an ImageNet ResNet (``resnet50``: Bottleneck,
  [3, 4, 6, 3], 2048 features, :190-201), ``fc`` = Linear(2048, classes), ``head`` = the
  projection MLP ``Linear(2048, 2048), ReLU, Linear(2048, 128)`` (:230-233);
- the encoder is torchvision's ResNet layer by layer: ``conv1`` 7x7 / 2 padding 3, ``bn1``,
  ``maxpool`` 3 / 2 padding 1 (:104-108), bottlenecks ``conv1 bn1 conv2 bn2 conv3 bn3`` with the
  stride on ``conv2``, ``downsample`` = Sequential(1x1 conv, BatchNorm) (:138-142), average pool
  (:115); the blocks' ``shortcut`` (``input + 0.0``, :20-22) holds no tensor;
- loading (util/model_loader.py:16-23): ``torch.load(".../supcon.pth")["model"]``, ``module.``
  removed from every key, ``load_state_dict(strict=False)``;
- the KNN features are the encoder's pooled output (feat_extract_largescale.py:55-61:
  ``model.encoder(inputs)``; logits ``model.fc(out)``); preprocessing Resize(256),
  CenterCrop(224), ImageNet mean and std (util/data_loader.py:47-53).

oodbench builds torchvision's ``resnet50`` and maps ``encoder.<name>`` onto ``<name>`` and
``fc.*`` onto ``fc.*``; the projection head ``head.*`` is dropped (no detector reads it). The
official load is not strict: a checkpoint without ``fc`` (SupCon trains no classifier) leaves
the official ``fc`` at random initialisation; oodbench does the same and warns, since only
feature-based detectors (KNN) are then meaningful. Every other key must be present.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from oodbench.errors import UnknownNameError
from oodbench.models.checkpoint import load_renamed, read_state_dict, require_weights
from oodbench.models.classifier import in_imagenet1k_order
from oodbench.models.preprocessing import resize_center_crop
from oodbench.models.torchvision_models import TorchvisionClassifier

#: the encoders of the official module (models/resnet_supcon.py:198-203) oodbench builds
ARCHITECTURES = ("resnet50", "resnet101")
#: the official evaluation transform (util/data_loader.py:47-53): Resize(256) bilinear,
#: CenterCrop(224), ImageNet mean and std
PREPROCESSING: dict[str, Any] = {"resize": 256, "crop_fraction": 0.875, "interpolation": "bilinear",
                 "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def load_supcon(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
) -> TorchvisionClassifier:
    """Loader of the ``supcon:`` family (see :func:`oodbench.models.load`): ``weights=PATH`` in
    knn-ood's layout (module docstring), or ``pretrained=False`` for random weights."""
    from torchvision import models as tv

    if name not in ARCHITECTURES:
        raise UnknownNameError("SupCon encoder", name, ARCHITECTURES)
    require_weights(f"supcon:{name}", weights, pretrained, "SupCon",
                    "a checkpoint of deeplearning-wisc/knn-ood's SupConResNet "
                    "(checkpoints/imagenet/pytorch_resnet50-supcon_imagenet/supcon.pth)")
    model = tv.get_model(name, weights=None, num_classes=1000 if num_classes is None
                         else num_classes)
    if weights is not None:
        expected = {("" if k.startswith("fc.") else "encoder.") + k: k
                    for k in model.state_dict()}
        kept = load_renamed(model, read_state_dict(weights), expected, repr(os.fspath(weights)),
                            "knn-ood SupConResNet", ignored=("head.",),
                            optional=("num_batches_tracked", "fc.weight", "fc.bias"),
                            head=("fc.weight", "fc.bias"))
        if any(k.startswith("fc.") for k in kept):
            warnings.warn(
                f"checkpoint {os.fspath(weights)!r} has no fc (SupCon trains no classifier): "
                "the logits come from a randomly initialised head, as in knn-ood's own loading "
                "(strict=False); only feature-based detectors such as knn are meaningful",
                stacklevel=2)
    classifier = TorchvisionClassifier(model, spec=f"supcon:{name}",
                                       transform=resize_center_crop(
                                           224, PREPROCESSING["crop_fraction"],
                                           tuple(PREPROCESSING["mean"]),
                                           tuple(PREPROCESSING["std"]),
                                           PREPROCESSING["interpolation"]))
    in_imagenet1k_order(classifier)  # the official ImageFolder order: sorted wnids
    return classifier
