"""Unleashing Mask (UM): cross-entropy flooded at the loss of a randomly masked copy.

Zhu, Li, Yao, Liu, Xu & Han, "Unleashing Mask: Explore the Intrinsic Out-of-Distribution
Detection Capability", ICML 2023 (arXiv 2306.03715; authors as in the official README's
citation; checked against tmlr-group/Unleashing-Mask
``utils/custom_loss.py``, ``estimate_loss.py``, ``trainers/default.py``,
``configs/estimate_loss/estimate_loss_cifar10.yaml``).

A well-trained model is fine-tuned with

    L = |beta * CE(z, y) - L_hat| + L_hat         (the batch mean CE; "flooding" at L_hat)

Above ``L_hat`` this is plain cross-entropy; below it the sign flips and the step *ascends*
the cross-entropy, so the model forgets the atypical training samples it fits last, which the
paper finds restores its OOD discrimination. ``L_hat`` (``constraint``) is the mean training
cross-entropy of a copy of the model whose conv / linear weights carry random top-k masks
keeping ``estimate_keep = 0.965`` of each layer (the official estimate config, ``prune_rate:
0.965``; :mod:`oodbench.train.masks`), computed by :func:`oodbench.train.methods.um.
estimate_constraint` before training when ``constraint="estimate"`` (the default), or given as
a number (the official ``--UM`` argument). ``beta = 1`` as the official default.

Pitfalls of the official code that do not apply here: the flooding is applied only when the
configured criterion is *not* ``CrossEntropyLoss`` (``get_criterion`` returns plain CE then, so
UM is silently off with the shipped configs); ``prune_rate`` is the fraction kept, not pruned.
The flooding acts on the batch mean, so under DDP each rank floods the mean of its own slice.
Any post-hoc detector then scores the fine-tuned model (the leaderboard row: ODIN,
T = 1000, eps = 0.0014, after UMAP on ResNet-50).
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F

from oodbench.constraints import AnyOf, Interval, Options, Positive
from oodbench.errors import InvalidInputError
from oodbench.losses.base import Loss, register

PAPER = "Zhu et al., ICML 2023, arXiv 2306.03715"

#: a mask fraction: the share of each layer's weights a mask keeps, in (0, 1]
KEEP = Interval(0, 1, "right", note="the mask fraction: the share of each layer's weights kept")
#: an option holding a mask fraction
Keep = Annotated[float, KEEP]


def check_keep(keep: float, who: str) -> float:
    """``keep`` (the share of each layer's weights a mask keeps) as a float in (0, 1]
    (:data:`KEEP`), else a one-line ``InvalidInputError``."""
    if KEEP.problem(keep) is not None:
        raise InvalidInputError(
            f"{who}: the mask fraction (the share of each layer's weights that is kept) must lie "
            f"{KEEP.describe()}; got {keep!r}"
        )
    return float(keep)


def flooded(loss: torch.Tensor, level: float) -> torch.Tensor:
    """``|loss - level| + level``: the loss above ``level``, its mirror image below."""
    return (loss - level).abs() + level


@register
class UnleashingMask(Loss):
    """|beta CE - L_hat| + L_hat, L_hat = the CE of a randomly masked copy (Zhu et al. 2023)."""

    name = "um"
    paper = PAPER
    method = "um"

    constraint: Annotated[float | str, AnyOf(
        Interval(0, None), Options("estimate"),
        note="L_hat; 'estimate': the CE of a randomly masked copy, computed before training")] = (
        "estimate")
    beta: Positive = 1.0
    estimate_keep: Keep = 0.965

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        if not isinstance(self.constraint, float):
            raise InvalidInputError(
                f"loss {self.name!r}: the constraint L_hat has not been estimated; train through "
                "oodbench.train.train (which estimates it first) or give constraint=<number>"
            )
        return flooded(self.beta * F.cross_entropy(logits, labels), self.constraint)
