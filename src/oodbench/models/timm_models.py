"""timm models as :class:`Classifier` (spec ``timm:<name>``, e.g. ``timm:resnet50.a1_in1k``).

timm gives every architecture the same split, which is exactly the one the OOD literature uses:

    feature_map = model.forward_features(x)                  (B, C, H, W), or ViT tokens (B, N, D)
    features    = model.forward_head(fmap, pre_logits=True)  pooling, norm, pre-logits layers
    logits      = model.get_classifier()(features)           the linear head

Preprocessing is the model's own eval transform from its pretrained config
(``timm.data.resolve_data_config`` + ``create_transform``).

BEiT (``timm:beit_*``): the features are the mean of the patch tokens through ``fc_norm``
(timm's ``global_pool="avg"``), the features of the BEiT and MOOD papers; the feature map is the
token sequence, class token first. ``weights=`` reads checkpoints in the layout of the official
BEiT / MOOD code (``{"model": ..., "args": Namespace}``, with the ``relative_position_index``
buffers that timm rebuilds) through timm's own ``beit.checkpoint_filter_fn``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from oodbench.errors import InvalidInputError, MissingDataError, UnknownNameError
from oodbench.models._adapter import ModuleHeadClassifier
from oodbench.models.checkpoint import load_strict, read_state_dict


class TimmClassifier(ModuleHeadClassifier):
    """A timm model split into ``forward_features`` -> ``forward_head(pre_logits=True)`` -> head.

    Put in eval mode on construction.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        spec: str,
        transform: Callable[..., torch.Tensor] | None = None,
        class_names: Sequence[str] | None = None,
    ):
        num_classes = int(getattr(model, "num_classes", 0) or 0)
        if num_classes <= 0:
            raise InvalidInputError(
                f"{spec}: the timm model has no classifier head (num_classes=0); create it with "
                "num_classes > 0"
            )
        super().__init__(
            spec=spec,
            transform=transform or eval_transform(model),
            num_classes=num_classes,
            class_names=class_names,
        )
        self.model = model
        head = model.get_classifier()  # type: ignore[operator]
        if not isinstance(head, nn.Module):  # distilled models return (head, head_dist)
            raise InvalidInputError(
                f"{spec}: the model has {len(head)} classifier heads (a distilled model?); use "
                "its single-head variant or oodbench.models.wrap"
            )
        self.eval()  # timm creates models in training mode (batch-norm batch statistics)

    def head_module(self) -> nn.Module:
        return self.model.get_classifier()  # type: ignore[operator,no-any-return]

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features(x)  # type: ignore[operator,no-any-return]

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(feature_map, pre_logits=True)  # type: ignore[operator,no-any-return]


def eval_transform(model: nn.Module) -> Callable[..., torch.Tensor]:
    """The model's eval preprocessing from its pretrained config (resize, crop, normalise)."""
    from timm.data import create_transform, resolve_data_config

    config = resolve_data_config({}, model=model)
    return create_transform(**config, is_training=False)  # type: ignore[no-any-return]


def imagenet_classes(model: nn.Module) -> tuple[list[str], list[str]] | tuple[None, None]:
    """``(class names, wnids)`` of the outputs (timm's ``ImageNetInfo``) when the model's output
    count is that of an ImageNet subset timm knows (1k, 12k, 21k, 22k), else ``(None, None)``."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset(model)
    if subset is None:
        return None, None
    info = ImageNetInfo(subset)
    return list(info.label_descriptions()), list(info.label_names())


def official_layout(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` in timm's key layout for ``model``: BEiT checkpoints of the official code go
    through ``timm.models.beit.checkpoint_filter_fn`` (drops the ``relative_position_index``
    buffers, resizes position tables); other architectures' state dicts are returned as given."""
    from timm.models import beit

    if isinstance(model, beit.Beit):
        return beit.checkpoint_filter_fn(state, model)
    return state


def create_timm_model(
    name: str,
    *,
    pretrained: bool,
    weights: str | os.PathLike[str] | None,
    num_classes: int | None,
    **create_options: Any,
) -> nn.Module:
    """``timm.create_model`` with clear errors for unknown names and weights that are offline.

    ``create_options`` go to ``timm.create_model`` (e.g. ``drop_rate=0.2`` for MC-dropout).
    """
    import timm

    if not timm.is_model(name):
        raise UnknownNameError("timm model", name, timm.list_models())
    extra: dict[str, Any] = dict(create_options)
    if num_classes is not None:
        extra["num_classes"] = num_classes
    if weights is not None:
        model = timm.create_model(name, pretrained=False, **extra)
        state = official_layout(model, read_state_dict(weights))
        load_strict(model, state, origin=repr(os.fspath(weights)))
        return model
    try:
        return timm.create_model(name, pretrained=pretrained, **extra)
    except (OSError, RuntimeError) as err:  # LocalEntryNotFoundError, URLError, no weights
        if not pretrained:
            raise
        raise MissingDataError(
            f"timm:{name}: pretrained weights are not available ({type(err).__name__}: {err}). "
            "Offline, timm reads them from the Hugging Face cache (HF_HOME, default "
            "~/.cache/huggingface/hub; set HF_HUB_OFFLINE=1 to skip network retries): download "
            f"them once where there is network (timm.create_model({name!r}, pretrained=True)), "
            "or pass weights=PATH to a local .safetensors / .pth state dict, or "
            "pretrained=False for random weights"
        ) from err


def load_timm(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
    **create_options: Any,
) -> TimmClassifier:
    """Loader of the ``timm:`` family (see :func:`oodbench.models.load`); ``create_options``
    (``drop_rate``, ``drop_path_rate``, ``img_size``, ...) go to ``timm.create_model``."""
    model = create_timm_model(
        name, pretrained=pretrained, weights=weights, num_classes=num_classes, **create_options
    )
    names, wnids = imagenet_classes(model) if pretrained and weights is None else (None, None)
    classifier = TimmClassifier(model, spec=f"timm:{name}", class_names=names)
    classifier.class_wnids = wnids
    return classifier
