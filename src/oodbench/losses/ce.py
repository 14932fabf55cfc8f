"""Cross-entropy, optionally with label smoothing.

    L = -(1 / N) sum_i sum_c q_ic log softmax(z_i)_c,   q_ic = (1 - eps) [c = y_i] + eps / C

Label smoothing: Szegedy et al., "Rethinking the Inception Architecture for Computer Vision",
CVPR 2016 (arXiv 1512.00567); ``smoothing = eps`` (0 = plain cross-entropy), the same
convention as ``torch.nn.functional.cross_entropy(label_smoothing=eps)``.
"""

from __future__ import annotations

from typing import Annotated

import torch.nn.functional as F

from oodbench.constraints import Interval
from oodbench.losses.base import Loss, register


@register
class CrossEntropy(Loss):
    """Cross-entropy with optional label smoothing (the standard baseline)."""

    name = "ce"
    paper = "label smoothing: Szegedy et al., CVPR 2016, arXiv 1512.00567"

    smoothing: Annotated[float, Interval(0, 1, "left", note="eps; 0: plain cross-entropy")] = 0.0

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        return F.cross_entropy(logits, labels, label_smoothing=self.smoothing)
