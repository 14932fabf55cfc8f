"""UMAP (Unleashing Mask Adopt Pruning): the UM loss, learning a weight mask instead of weights.

Zhu et al., "Unleashing Mask: Explore the Intrinsic Out-of-Distribution Detection Capability",
ICML 2023 (arXiv 2306.03715; checked against tmlr-group/Unleashing-Mask
``configs/smallscale/densenet_cifar10_UMAP.yaml``, ``utils/conv_type.py``,
``utils/net_utils.py`` ``freeze_model_weights``).

The loss is UM's, ``|beta * CE - L_hat| + L_hat`` (:mod:`oodbench.losses.um`), but every weight
and bias of the trained part stays frozen: what trains are the scores of a top-k mask on each
conv / linear weight, keeping ``keep = 0.8`` of each layer (the official ``prune_rate: 0.8``,
the fraction *kept*), by the straight-through estimator (:mod:`oodbench.train.masks`). The
trained model is the original one with the masked weights ``W * m``
(``oodbench.train.train`` returns it with the masks baked in, and writes it to
``model.safetensors``; the scores go to ``method.safetensors`` for resuming).

Differences from the official code: BatchNorm layers keep their affine parameters frozen as
there (``freeze_model_weights``); their running statistics follow oodbench's rule for the
trained modules (train mode, as the official ``model.train()``). The leaderboard row
"ODIN+UMAP (ResNet-50)", ImageNet-1k vs SUN AUROC 86.92 / FPR95 49.69, is ODIN (T = 1000,
eps = 0.0014) on a ResNet-50 after UMAP.
"""

from __future__ import annotations

from oodbench.losses.base import register
from oodbench.losses.um import PAPER, Keep, UnleashingMask


@register
class UnleashingMaskPruning(UnleashingMask):
    """UM's flooded CE, learning a top-k weight mask (edge-popup) with the weights frozen."""

    name = "umap"
    paper = PAPER
    method = "umap"

    keep: Keep = 0.8
