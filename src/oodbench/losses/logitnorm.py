"""LogitNorm: cross-entropy of the logits normalised to a fixed norm.

Wei, Xie, Cheng, Feng, An & Li, "Mitigating Neural Network Overconfidence with Logit
Normalization", ICML 2022 (arXiv 2205.09310):

    L = CE( z / (tau * (||z||_2 + 1e-7)), y ),   tau = 0.04 (the paper's CIFAR-10 value)

The 1e-7 keeps an all-zero logit vector finite, as in the authors' code
(github.com/hongxin001/logitnorm_ood, ``LogitNormLoss``). Only training changes: at test time the
network's raw logits are scored as usual.

Short schedules: the gradient reaching the logits is CE's gradient of the normalised logits
times ``1 / (tau ||z||)``, projected orthogonally to ``z``. A fresh network has ``||z||`` near
0.5, so at tau = 0.04 the first steps are about 45-60 times larger than CE's at the same
learning rate, ``||z||`` grows fast (the orthogonal steps only lengthen it) and the effective
step then shrinks as ``1 / ||z||``. Over the paper's 200 epochs this transient does not matter
(the authors' own log for WRN-40-2 is at chance after epoch 1 and ends at 94.5 %); in a run of
a few epochs it does: ``studies/logitnorm_diagnosis.py`` measures it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oodbench.constraints import Positive
from oodbench.losses.base import Loss, register

NORM_EPS = 1e-7


@register
class LogitNorm(Loss):
    """Cross-entropy on logits scaled to norm 1 / tau (Wei et al., ICML 2022)."""

    name = "logitnorm"
    paper = "Wei et al., ICML 2022, arXiv 2205.09310"

    tau: Positive = 0.04

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        norms = torch.linalg.vector_norm(logits, dim=1, keepdim=True) + NORM_EPS
        return F.cross_entropy(logits / (norms * self.tau), labels)
