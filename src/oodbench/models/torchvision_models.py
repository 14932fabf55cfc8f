"""torchvision classification models as :class:`Classifier` (spec ``torchvision:<name>``).

Weights come from torchvision's weight enums (``get_model_weights(name).DEFAULT``), and so do
the eval transform (``weights.transforms()``) and the class names (``weights.meta``).
torchvision models have no common feature/head interface, so each architecture family gets a
split here, mirroring its own ``forward``:

=================  ===========================================  ==============================
family             feature map                                  pooled features -> head
=================  ===========================================  ==============================
ResNet, ResNeXt,   ``layer4`` output                            avgpool, flatten -> ``fc``
Wide ResNet
RegNet             ``trunk_output``                             avgpool, flatten -> ``fc``
DenseNet           ReLU of ``features``                         avgpool, flatten -> ``classifier``
ConvNeXt           ``features``                                 avgpool, LayerNorm -> last Linear
EfficientNet v1/2, ``features``                                 avgpool, flatten, the
MobileNet v2/v3,                                                classifier's layers before its
VGG, AlexNet                                                    last Linear -> last Linear
VisionTransformer  encoder tokens (B, 1 + N, D)                 class token -> ``heads.head``
Swin v1/v2         normed ``features``, as (B, C, H, W)         avgpool, flatten -> ``head``
MaxViT             ``blocks`` output                            pool, norm, pre-logits -> last Linear
=================  ===========================================  ==============================

Other architectures (GoogLeNet, Inception v3, ShuffleNet, SqueezeNet, MNASNet) raise an error
that points to :func:`oodbench.models.wrap`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from oodbench.errors import (
    ClassCountMismatchError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)
from oodbench.models._adapter import ModuleHeadClassifier
from oodbench.models.checkpoint import load_strict, read_state_dict

Net = Any  # a torchvision model; its attributes differ per family


class _Split(NamedTuple):
    feature_map: Callable[[Net, torch.Tensor], torch.Tensor]
    pool: Callable[[Net, torch.Tensor], torch.Tensor]
    head: Callable[[Net], str]  # the head's submodule name


def _resnet_fmap(m: Net, x: torch.Tensor) -> torch.Tensor:
    x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
    return m.layer4(m.layer3(m.layer2(m.layer1(x))))


def _regnet_fmap(m: Net, x: torch.Tensor) -> torch.Tensor:
    return m.trunk_output(m.stem(x))


def _features(m: Net, x: torch.Tensor) -> torch.Tensor:
    return m.features(x)


def _densenet_fmap(m: Net, x: torch.Tensor) -> torch.Tensor:
    return F.relu(m.features(x))


def _vit_fmap(m: Net, x: torch.Tensor) -> torch.Tensor:
    x = m._process_input(x)
    x = torch.cat([m.class_token.expand(x.shape[0], -1, -1), x], dim=1)
    return m.encoder(x)


def _swin_fmap(m: Net, x: torch.Tensor) -> torch.Tensor:
    return m.permute(m.norm(m.features(x)))


def _maxvit_fmap(m: Net, x: torch.Tensor) -> torch.Tensor:
    x = m.stem(x)
    for block in m.blocks:
        x = block(x)
    return x


def _avgpool_flat(m: Net, f: torch.Tensor) -> torch.Tensor:
    return torch.flatten(m.avgpool(f), 1)


def _global_avg_flat(m: Net, f: torch.Tensor) -> torch.Tensor:
    return torch.flatten(F.adaptive_avg_pool2d(f, 1), 1)


def _avgpool_flat_mlp(m: Net, f: torch.Tensor) -> torch.Tensor:
    return m.classifier[:-1](torch.flatten(m.avgpool(f), 1))


def _global_avg_flat_mlp(m: Net, f: torch.Tensor) -> torch.Tensor:
    return m.classifier[:-1](_global_avg_flat(m, f))


def _convnext_pool(m: Net, f: torch.Tensor) -> torch.Tensor:
    return m.classifier[:-1](m.avgpool(f))  # LayerNorm2d, Flatten


def _vit_pool(m: Net, f: torch.Tensor) -> torch.Tensor:
    return m.heads[:-1](f[:, 0])  # pre-logits layer and activation, when present


def _maxvit_pool(m: Net, f: torch.Tensor) -> torch.Tensor:
    return m.classifier[:-1](f)


def _named(name: str, m: Net) -> str:
    return name


def _last_of(attr: str, m: Net) -> str:
    return f"{attr}.{len(getattr(m, attr)) - 1}"


def _splits() -> dict[type, _Split]:
    from torchvision import models as tv

    fc, classifier_last = partial(_named, "fc"), partial(_last_of, "classifier")
    mlp_tail = _Split(_features, _avgpool_flat_mlp, classifier_last)
    return {
        tv.ResNet: _Split(_resnet_fmap, _avgpool_flat, fc),
        tv.RegNet: _Split(_regnet_fmap, _avgpool_flat, fc),
        tv.DenseNet: _Split(_densenet_fmap, _global_avg_flat, partial(_named, "classifier")),
        tv.ConvNeXt: _Split(_features, _convnext_pool, classifier_last),
        tv.EfficientNet: mlp_tail,
        tv.MobileNetV3: mlp_tail,
        tv.VGG: mlp_tail,
        tv.AlexNet: mlp_tail,
        tv.MobileNetV2: _Split(_features, _global_avg_flat_mlp, classifier_last),
        tv.VisionTransformer: _Split(_vit_fmap, _vit_pool, partial(_named, "heads.head")),
        tv.SwinTransformer: _Split(_swin_fmap, _avgpool_flat, partial(_named, "head")),
        tv.MaxVit: _Split(_maxvit_fmap, _maxvit_pool, classifier_last),
    }


def split_for(model: nn.Module, spec: str) -> _Split:
    """The split of ``model``'s family; an error pointing to ``wrap`` for other families."""
    for cls, split in _splits().items():
        if isinstance(model, cls):
            return split
    raise InvalidInputError(
        f"{spec}: oodbench cannot split a torchvision {type(model).__name__} into feature map, "
        "pooled features and linear head. Wrap it yourself: oodbench.models.wrap(model, "
        "feature_layer=<name of the last block>, head_layer=<name of the final nn.Linear>, "
        "pool=<feature map -> features>)"
    )


class TorchvisionClassifier(ModuleHeadClassifier):
    """A torchvision classification model split as in the table of the module docstring (put in
    eval mode on construction)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        spec: str,
        transform: Callable[..., torch.Tensor],
        class_names: list[str] | None = None,
    ):
        split = split_for(model, spec)
        head = model.get_submodule(split.head(model))
        if not isinstance(head, nn.Linear):
            raise InvalidInputError(f"{spec}: expected a Linear head, found {type(head).__name__}")
        super().__init__(
            spec=spec, transform=transform, num_classes=head.out_features, class_names=class_names
        )
        self.model = model
        self._split = split
        self.eval()

    def head_module(self) -> nn.Module:
        return self.model.get_submodule(self._split.head(self.model))

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self._split.feature_map(self.model, x)

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return self._split.pool(self.model, feature_map)


def load_torchvision(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
) -> TorchvisionClassifier:
    """Loader of the ``torchvision:`` family (see :func:`oodbench.models.load`)."""
    from torchvision import models as tv

    valid = tv.list_models(module=tv)
    if name not in valid:
        raise UnknownNameError("torchvision classification model", name, valid)
    enum = tv.get_model_weights(name).DEFAULT
    extra = {} if num_classes is None else {"num_classes": num_classes}
    if weights is not None or not pretrained:
        model = tv.get_model(name, weights=None, **extra)
        if weights is not None:
            load_strict(model, read_state_dict(weights), origin=repr(os.fspath(weights)))
    else:
        model = _pretrained(name, enum, extra)
    categories = enum.meta.get("categories")
    names = list(categories) if pretrained and weights is None and categories else None
    classifier = TorchvisionClassifier(
        model, spec=f"torchvision:{name}", transform=enum.transforms(), class_names=names
    )
    if names is not None and len(names) == 1000:  # torchvision's classifiers: ImageNet-1k
        from oodbench.data.imagenet import imagenet1k_wnids

        classifier.class_wnids = imagenet1k_wnids()
    return classifier


def _pretrained(name: str, enum: Any, extra: dict[str, int]) -> nn.Module:
    from torchvision import models as tv

    try:
        return tv.get_model(name, weights=enum, **extra)  # type: ignore[no-any-return]
    except ValueError as err:  # num_classes differs from the weights'
        raise ClassCountMismatchError(
            f"torchvision:{name}: the pretrained weights {enum} have "
            f"{len(enum.meta['categories'])} classes, not {extra.get('num_classes')} ({err}); "
            "pass pretrained=False, or weights=PATH to a checkpoint with your head"
        ) from err
    except (OSError, RuntimeError) as err:  # URLError offline, or a broken download
        target = Path(torch.hub.get_dir()) / "checkpoints" / Path(enum.url).name
        raise MissingDataError(
            f"torchvision:{name}: pretrained weights {enum} are not available "
            f"({type(err).__name__}: {err}). Offline, put {enum.url} at {target} "
            "(TORCH_HOME moves it), or pass weights=PATH to a local state dict, or "
            "pretrained=False for random weights"
        ) from err
