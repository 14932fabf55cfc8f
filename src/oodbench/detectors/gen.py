"""GEN: generalized entropy of the top-M softmax probabilities.

Liu, Lochman & Zach, "GEN: Pushing the Limits of Softmax-Based Out-of-Distribution Detection",
CVPR 2023 (https://github.com/XixiLiu95/GEN).

    G_gamma(p) = sum_{j in top-M} p_j^gamma (1 - p_j)^gamma,    p = softmax(z(x))
    kappa(x)   = -G_gamma(p)

summed over the M largest probabilities (all classes when M >= C). Defaults ``gamma=0.1`` and
``M=100``, the paper's ImageNet setting. In log space, from ``s`` (``_math.other_mass``, the
softmax mass of the other classes relative to the top one): ``log p_j = z_j - max z - log1p(s)``;
for the top class ``1 - p = s / (1 + s)`` in float64, for the others (p <= 1/2)
``log(1 - p) = log1p(-p)`` in the logits' precision. Probabilities near 1 keep full relative
precision and no tiny probability underflows (``p^gamma`` of p = 1e-50 is not 0); about 1e-7
relative against an all-float64 computation for float32 logits.

pytorch-ood 0.4.0 ``GEN.score(logits, gamma, M)`` returns the *mean* over the top-M terms
(a constant factor min(M, C)) with p clamped to ``[1e-7, 1 - 1e-7]`` and, by default, ``M=None``
(all classes): ``kappa = -min(M, C) * GEN.score(logits, gamma, M)`` whenever no probability is
clamped. OpenOOD's ``GENPostprocessor`` sums like the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from oodbench.constraints import Integer, Positive
from oodbench.detectors._math import other_mass, row_max, top_values, working
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class GEN(Detector):
    """Negative generalized entropy of the M largest softmax probabilities."""

    name = "gen"
    requires = frozenset({"logits"})
    paper = "Liu, Lochman & Zach, CVPR 2023"
    score_only_hyperparams = frozenset({"gamma", "M"})

    gamma: Positive = 0.1
    M: Annotated[int, Integer(min=1, note="a number of classes")] = 100

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(len(acts), lambda rows: self._chunk(acts.logits[rows]), acts.num_classes)

    def _chunk(self, logits: np.ndarray) -> torch.Tensor:
        z = working(logits)
        top, where = row_max(z)
        others = other_mass(z, top, where)
        values = top_values(z, self.M)
        first = row_max(values)[1]  # the top class among the M
        log_norm = torch.log1p(others)  # log(1 + s), float64
        # the other M - 1 classes (p <= 1/2): log p and log(1 - p) in the working precision
        log_p = (values - top) - log_norm[:, None].to(values.dtype)
        terms = torch.exp(self.gamma * (log_p + torch.log1p(-torch.exp(log_p)))).scatter_(1, first, 0.0)
        # the top class in float64: p = 1 / (1 + s), 1 - p = s / (1 + s)
        top_term = torch.exp(self.gamma * (torch.log(others) - 2.0 * log_norm))
        return -(top_term + terms.sum(dim=1).double())
