"""``wrap``: any ``nn.Module`` as a :class:`Classifier`, given the names of two of its layers.

Forward hooks read the output of ``feature_layer`` (the feature map) and the input and output
of ``head_layer`` (features and logits) during the module's own forward pass, so ``features``,
``logits`` and ``forward_all`` are exact for any architecture. ``pool`` (feature map ->
features, used by detectors that edit the feature map, e.g. ASH) cannot be read from the
module; it defaults to global average pooling, and the first ``forward_all`` checks that
``pool(feature_map)`` reproduces the head's input, raising if it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.models._adapter import ModuleHeadClassifier


def global_average_pool(feature_map: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, C) spatial mean; (B, D) unchanged."""
    if feature_map.ndim == 4:
        return feature_map.mean(dim=(2, 3))
    if feature_map.ndim == 2:
        return feature_map
    raise InvalidInputError(
        f"cannot guess how to pool a feature map of shape {tuple(feature_map.shape)}: pass "
        "pool=<callable feature map -> features> to wrap() (e.g. lambda t: t[:, 0] for a "
        "class token)"
    )


def imagenet_eval_transform() -> Callable[..., torch.Tensor]:
    """The usual ImageNet eval preprocessing: resize 256, centre crop 224, ImageNet mean/std."""
    from torchvision import transforms as T

    return T.Compose(
        [
            T.Resize(256, interpolation=T.InterpolationMode.BILINEAR),
            T.CenterCrop(224),
            T.ToTensor(),
            T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
        ]
    )


class _Stop(Exception):
    """Raised by a hook to end a forward pass early, once the feature map is known."""


class ModuleClassifier(ModuleHeadClassifier):
    """A module split by hooks on its ``feature_layer`` and ``head_layer`` (see module doc)."""

    def __init__(
        self,
        module: nn.Module,
        *,
        feature_layer: str | None,
        head_layer: str,
        pool: Callable[[torch.Tensor], torch.Tensor] | None,
        transform: Callable[..., torch.Tensor],
        spec: str,
        num_classes: int | None,
        class_names: Sequence[str] | None,
    ):
        layers = dict(module.named_modules())
        for layer in (feature_layer, head_layer):
            if layer is not None and (layer not in layers or layer == ""):
                raise UnknownNameError("layer", layer, [n for n in layers if n])
        head = layers[head_layer]
        if isinstance(head, nn.Linear):
            num_classes = head.out_features
        elif num_classes is None:
            raise InvalidInputError(
                f"head_layer {head_layer!r} is a {type(head).__name__}, not nn.Linear: pass "
                "num_classes="
            )
        super().__init__(
            spec=spec, transform=transform, num_classes=num_classes, class_names=class_names
        )
        self.module = module
        self.feature_layer = feature_layer
        self.head_layer = head_layer
        self._pool = pool or global_average_pool
        self._pool_checked = False

    def head_module(self) -> nn.Module:
        return self.module.get_submodule(self.head_layer)

    def _run(self, x: torch.Tensor, *, stop_at_feature_map: bool) -> dict[str, torch.Tensor]:
        seen: dict[str, torch.Tensor] = {}

        def on_feature(_m: nn.Module, _inp: Any, out: torch.Tensor) -> None:
            # a copy: later layers may modify their input in place (ReLU(inplace=True))
            seen["feature_map"] = out if stop_at_feature_map else out.clone()
            if stop_at_feature_map:
                raise _Stop

        def on_head(_m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            seen["features"], seen["logits"] = inp[0], out
            if self.feature_layer is None:
                seen["feature_map"] = inp[0]
            if stop_at_feature_map:
                raise _Stop

        hooks = [self.head_module().register_forward_hook(on_head)]
        if self.feature_layer is not None:
            feature = self.module.get_submodule(self.feature_layer)
            hooks.append(feature.register_forward_hook(on_feature))
        try:
            self.module(x)
        except _Stop:
            pass
        finally:
            for hook in hooks:
                hook.remove()
        if stop_at_feature_map and "feature_map" not in seen:
            self._check_ran(seen)
        return seen

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(x, stop_at_feature_map=True)["feature_map"]

    def _check_ran(self, seen: dict[str, torch.Tensor]) -> None:
        for key, layer in (("feature_map", self.feature_layer), ("logits", self.head_layer)):
            if key not in seen:
                raise InvalidInputError(
                    f"{self.spec}: layer {layer!r} did not run in the module's forward pass; "
                    "name a layer that forward() calls"
                )

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        if self.feature_layer is None:
            return feature_map
        return self._pool(feature_map)

    def forward_all(
        self, x: torch.Tensor, capture: Iterable[str] = ("logits", "features")
    ) -> dict[str, torch.Tensor]:
        capture = set(capture)
        seen = self._run(x, stop_at_feature_map=False)
        self._check_ran(seen)
        if not self._pool_checked:
            self._check_pool(seen["feature_map"], seen["features"])
        return {k: v for k, v in seen.items() if k in capture}

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_all(x, ("features",))["features"]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_all(x, ("logits",))["logits"]

    def _check_pool(self, feature_map: torch.Tensor, features: torch.Tensor) -> None:
        pooled = self.pool(feature_map)
        if pooled.shape != features.shape or not torch.allclose(
            pooled.float(), features.float(), rtol=1e-4, atol=1e-5
        ):
            raise InvalidInputError(
                f"{self.spec}: pool(output of {self.feature_layer!r}) does not reproduce the "
                f"input of {self.head_layer!r} (shapes {tuple(pooled.shape)} vs "
                f"{tuple(features.shape)}); pass wrap(..., pool=<the layers between them>)"
            )
        self._pool_checked = True


def wrap(
    module: nn.Module,
    *,
    feature_layer: str | None,
    head_layer: str,
    transform: Callable[..., torch.Tensor] | None = None,
    spec: str | None = None,
    pool: Callable[[torch.Tensor], torch.Tensor] | None = None,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
) -> ModuleClassifier:
    """Any ``nn.Module`` as a :class:`Classifier`, in eval mode.

    Args:
        module: the network; ``module(x)`` must run its head.
        feature_layer: name (as in ``named_modules()``) of the layer whose output is the
            feature map, e.g. ``"layer4"``; ``None`` when there is none (the features are then
            also the feature map).
        head_layer: name of the final layer, features -> logits, e.g. ``"fc"``.
        transform: PIL image -> input tensor (default: ImageNet eval, 224 px, ImageNet mean/std).
        spec: the model's name in results and in the cache key (default ``module:<class>``).
        pool: feature map -> features (default: global average pooling), checked once.
        num_classes: only needed when the head is not an ``nn.Linear``.
        class_names: names of the outputs, when known.

    Example: ``wrap(torchvision.models.resnet18(), feature_layer="layer4", head_layer="fc")``.
    """
    return ModuleClassifier(
        module,
        feature_layer=feature_layer,
        head_layer=head_layer,
        pool=pool,
        transform=transform or imagenet_eval_transform(),
        spec=spec or f"module:{type(module).__qualname__}",
        num_classes=num_classes,
        class_names=class_names,
    ).eval()
