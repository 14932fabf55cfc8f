"""Outlier Exposure: cross-entropy on ID data plus a pull towards uniform on outliers.

Hendrycks, Mazeika & Dietterich, "Deep Anomaly Detection with Outlier Exposure", ICLR 2019
(arXiv 1812.04606):

    L = CE(z_in, y) + lambda * mean_outliers[ -(1 / C) sum_c log softmax(z_out)_c ]

the second term is the cross-entropy from the outlier's softmax to the uniform distribution,
``logsumexp(z) - mean_c z_c``, with ``lambda = 0.5`` (the paper's value for vision). Training
needs an outlier source besides the ID data.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F

from oodbench.constraints import Interval
from oodbench.errors import InvalidInputError
from oodbench.losses.base import Loss, register


def uniform_cross_entropy(logits: torch.Tensor) -> torch.Tensor:
    """``-(1 / C) sum_c log softmax(z)_c`` per row: (N,)."""
    return torch.logsumexp(logits, dim=1) - logits.mean(dim=1)


@register
class OutlierExposure(Loss):
    """CE on ID plus lambda x cross-entropy to uniform on outliers (Hendrycks et al. 2019)."""

    name = "oe"
    paper = "Hendrycks et al., ICLR 2019, arXiv 1812.04606"
    needs_outliers = True

    weight: Annotated[float, Interval(0, None, note="lambda")] = 0.5

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        if outlier_logits.shape[1:] != logits.shape[1:]:
            raise InvalidInputError(
                f"oe: outlier logits have {outlier_logits.shape[1]} outputs, ID logits "
                f"{logits.shape[1]}; both must come from the same head"
            )
        return F.cross_entropy(logits, labels) + self.weight * uniform_cross_entropy(
            outlier_logits
        ).mean()
