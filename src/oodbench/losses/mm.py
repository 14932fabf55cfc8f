"""Multi-class margin (MM) loss, the baseline the HEM paper compares against.

Crammer & Singer-style hinge loss as implemented by ``torch.nn.MultiMarginLoss`` (p = 1):

    L_i = (1 / C) sum_{j != y_i} max(0, mu - z_{i,y_i} + z_{i,j}),      L = mean_i L_i

with margin ``mu = 1`` (torch's default, and the margin of HEM's reference implementation;
the MM margin of Spratling & Schütt, "A margin-based replacement for cross-entropy loss",
arXiv 2501.12191, could not be checked against the paper's text when this was written). Note
the division by all C outputs, not C - 1, exactly as torch.
"""

from __future__ import annotations

from typing import Annotated

import torch.nn.functional as F

from oodbench.constraints import Options, Positive
from oodbench.losses.base import Loss, register


@register
class MultiMargin(Loss):
    """Multi-class hinge loss (torch MultiMarginLoss, p = 1, margin 1)."""

    name = "mm"
    paper = "baseline of Spratling & Schütt, arXiv 2501.12191 (torch.nn.MultiMarginLoss)"

    margin: Positive = 1.0
    p: Annotated[int, Options(1, 2, note="as torch.nn.MultiMarginLoss")] = 1

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        return F.multi_margin_loss(logits, labels, p=self.p, margin=self.margin)
