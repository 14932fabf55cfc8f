"""LogitNorm: cross-entropy of the logits normalised to a fixed norm.

Wei, Xie, Cheng, Feng, An & Li, "Mitigating Neural Network Overconfidence with Logit
Normalization", ICML 2022 (arXiv 2205.09310):

    L = CE( z / (tau * (||z||_2 + 1e-7)), y ),   tau = 0.04 (the paper's CIFAR-10 value)

The 1e-7 keeps an all-zero logit vector finite, as in the authors' code
(github.com/hongxin001/logitnorm_ood, ``LogitNormLoss``). Only training changes: at test time the
network's raw logits are scored as usual.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oodbench.errors import InvalidInputError
from oodbench.losses.base import Loss, register

NORM_EPS = 1e-7


@register
class LogitNorm(Loss):
    """Cross-entropy on logits scaled to norm 1 / tau (Wei et al., ICML 2022)."""

    name = "logitnorm"
    paper = "Wei et al., ICML 2022, arXiv 2205.09310"

    def __init__(self, tau: float = 0.04):
        super().__init__()
        if not tau > 0:
            raise InvalidInputError(f"logitnorm: tau must be > 0; got {tau}")
        self.tau = float(tau)

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        norms = torch.linalg.vector_norm(logits, dim=1, keepdim=True) + NORM_EPS
        return F.cross_entropy(logits / (norms * self.tau), labels)
