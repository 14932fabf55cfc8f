"""The ``Classifier`` contract every model adapter implements.

A classifier is split at the point the OOD literature needs:

    x ──► feature_map(x) ──► pool(.) ──► features f (penultimate) ──► head(f) = f @ W.T + b ──► logits
          (B, C, H, W) or                (B, D)                      W: (num_classes, D)
          ViT tokens (B, N, D)

``forward_all`` computes everything in one pass (what the extraction engine calls); the single
methods exist for detectors and tests. For linear heads ``logits == features @ head_weight.T +
head_bias`` holds exactly.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

CAPTURABLE = ("logits", "features", "feature_map")


class Classifier(nn.Module):
    """A model seen as ``feature_map -> pool -> features -> head -> logits``.

    Attributes set by every adapter:
        spec: the string it was loaded from (``"timm:resnet50"``), part of the cache key.
        transform: the model's own eval preprocessing (PIL image -> float tensor (3, H, W)).
        num_classes, class_names (``None`` when unknown), class_wnids (the WordNet id of
        each output, e.g. the 1000 ImageNet-1k wnids in sorted order; ``None`` when unknown).
        ``extract`` maps a source's class names onto these (``oodbench.data.labels``).
    """

    spec: str
    transform: Callable[..., torch.Tensor]
    num_classes: int
    class_names: Sequence[str] | None = None
    class_wnids: Sequence[str] | None = None

    @abstractmethod
    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The last block's output before global pooling."""

    @abstractmethod
    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        """Global pooling (and any pre-logit layers) from feature map to penultimate features."""

    @abstractmethod
    def head(self, features: torch.Tensor) -> torch.Tensor:
        """The final classifier layer: features -> logits."""

    @property
    @abstractmethod
    def head_weight(self) -> torch.Tensor:
        """The linear head's weight, shape (num_classes, D)."""

    @property
    @abstractmethod
    def head_bias(self) -> torch.Tensor:
        """The linear head's bias, shape (num_classes,) (zeros when the head has none)."""

    @abstractmethod
    def weights_digest(self) -> str:
        """A hex digest of the parameters and buffers, part of the cache key."""

    # Derived, shared by every adapter -------------------------------------------------------
    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_feature_map(x)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.forward_feature_map(x))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x)

    def forward_all(
        self, x: torch.Tensor, capture: Iterable[str] = ("logits", "features")
    ) -> dict[str, torch.Tensor]:
        """One forward pass returning the requested subset of ``CAPTURABLE``."""
        capture = set(capture)
        fmap = self.forward_feature_map(x)
        feats = self.pool(fmap)
        out = {"logits": self.head(feats), "features": feats, "feature_map": fmap}
        return {k: v for k, v in out.items() if k in capture}


def in_imagenet1k_order(classifier: Classifier) -> None:
    """Name a 1,000-output head's classes by ImageNet-1k's wnids in sorted order (the order
    of an ImageFolder of the ImageNet train or val folders, which the official loaders use);
    any other head keeps ``class_wnids = None``."""
    if classifier.num_classes == 1000:
        from oodbench.data.imagenet import imagenet1k_wnids

        classifier.class_wnids = imagenet1k_wnids()
