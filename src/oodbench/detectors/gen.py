"""GEN: generalized entropy of the top-M softmax probabilities.

Liu, Lochman & Zach, "GEN: Pushing the Limits of Softmax-Based Out-of-Distribution Detection",
CVPR 2023 (https://github.com/XixiLiu95/GEN).

    G_gamma(p) = sum_{j in top-M} p_j^gamma (1 - p_j)^gamma,    p = softmax(z(x))
    kappa(x)   = -G_gamma(p)

summed over the M largest probabilities (all classes when M >= C). Defaults ``gamma=0.1`` and
``M=100``, the paper's ImageNet setting. Computed in float64 in log space: ``1 - p`` is
``-expm1(log p)`` for every class but the top one, whose ``1 - p`` is the sum of the other
probabilities, so probabilities near 0 or 1 keep full relative precision.

pytorch-ood 0.4.0 ``GEN.score(logits, gamma, M)`` returns the *mean* over the top-M terms
(a constant factor min(M, C)) with p clamped to ``[1e-7, 1 - 1e-7]`` and, by default, ``M=None``
(all classes): ``kappa = -min(M, C) * GEN.score(logits, gamma, M)`` whenever no probability is
clamped. OpenOOD's ``GENPostprocessor`` sums like the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import as_tensor
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations


@register
@dataclass
class GEN(Detector):
    """Negative generalized entropy of the M largest softmax probabilities."""

    name = "gen"
    requires = frozenset({"logits"})
    paper = "Liu, Lochman & Zach, CVPR 2023"
    score_only_hyperparams = frozenset({"gamma", "M"})

    gamma: float = 0.1
    M: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.gamma > 0:
            raise InvalidInputError(f"gen: gamma must be > 0; got {self.gamma}")
        if int(self.M) < 1:
            raise InvalidInputError(f"gen: M must be a positive number of classes; got {self.M}")

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(len(acts), lambda rows: self._chunk(acts.logits[rows]))

    def _chunk(self, logits: np.ndarray) -> torch.Tensor:
        log_p, log_q = _log_p_and_log_one_minus_p(logits)
        top = torch.topk(log_p, k=min(int(self.M), log_p.shape[1]), dim=1)
        return -torch.exp(self.gamma * (top.values + log_q.gather(1, top.indices))).sum(dim=1)


def _log_p_and_log_one_minus_p(logits: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``log p`` and ``log(1 - p)`` of ``p = softmax(logits)``, both accurate near p = 1."""
    z = as_tensor(logits)
    z = z - z.max(dim=1, keepdim=True).values
    log_p = torch.log_softmax(z, dim=1)
    log_q = torch.log(-torch.expm1(log_p))
    top = z.argmax(dim=1, keepdim=True)
    others = torch.exp(z).scatter(1, top, 0.0).sum(dim=1, keepdim=True)  # sum_{c != top} e^{z_c}
    log_q.scatter_(1, top, torch.log(others) - torch.log1p(others))
    return log_p, log_q
