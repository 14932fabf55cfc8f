"""GEN: generalized entropy of the top-M softmax probabilities.

Liu, Lochman & Zach, "GEN: Pushing the Limits of Softmax-Based Out-of-Distribution Detection",
CVPR 2023 (https://github.com/XixiLiu95/GEN).

    G_gamma(p) = sum_{j in top-M} p_j^gamma (1 - p_j)^gamma,    p = softmax(z(x))
    kappa(x)   = -G_gamma(p)

summed over the M largest probabilities (all classes when M >= C). Defaults ``gamma=0.1`` and
``M=100``, the paper's ImageNet setting. From ``_math.softmax_parts`` (float32 exps, the rest
in float64) in log space: ``log p_j = d_j - log1p(s)`` with ``d_j = z_j - max z``, ``1 - p`` is
``-expm1(log p)`` for every class but the top one, whose ``1 - p`` is ``s / (1 + s)`` (the mass
of the other classes), so probabilities near 0 or 1 keep full relative precision and no tiny
probability underflows (``p^gamma`` of p = 1e-50 is not 0).

pytorch-ood 0.4.0 ``GEN.score(logits, gamma, M)`` returns the *mean* over the top-M terms
(a constant factor min(M, C)) with p clamped to ``[1e-7, 1 - 1e-7]`` and, by default, ``M=None``
(all classes): ``kappa = -min(M, C) * GEN.score(logits, gamma, M)`` whenever no probability is
clamped. OpenOOD's ``GENPostprocessor`` sums like the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import softmax_parts
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

    gamma: float = 0.1
    M: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.gamma > 0:
            raise InvalidInputError(f"gen: gamma must be > 0; got {self.gamma}")
        if int(self.M) < 1:
            raise InvalidInputError(f"gen: M must be a positive number of classes; got {self.M}")

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(len(acts), lambda rows: self._chunk(acts.logits[rows]), acts.num_classes)

    def _chunk(self, logits: np.ndarray) -> torch.Tensor:
        _, d, others = softmax_parts(logits)
        top_d = torch.topk(d, k=min(int(self.M), d.shape[1]), dim=1).values.double()
        log_norm = torch.log1p(others)
        log_p = top_d - log_norm[:, None]
        log_q = torch.log(-torch.expm1(log_p))
        log_q[:, 0] = torch.log(others) - log_norm  # 1 - p_max = s / (1 + s)
        return -torch.exp(self.gamma * (log_p + log_q)).sum(dim=1)
