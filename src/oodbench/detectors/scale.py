"""SCALE: scale all penultimate activations by the ASH-S factor, scored with the energy.

Xu, Chen, Franchi & Yao, "Scaling for Training Time and Post-hoc Out-of-distribution Detection
Enhancement", ICLR 2024 (arXiv 2310.00227).

Per sample, with a = the D penultimate activations and k = D - round(D * p / 100):

    s1 = sum_j a_j,   s2 = sum of the k largest a_j
    a' = a * exp(s1 / s2)                  (nothing is pruned, unlike ASH-S)
    kappa = logsumexp(W a' + b)            (negative energy, T = 1)

Nothing is fitted. Default ``percentile=85`` (the paper's ImageNet ResNet-50 setting), applied
after global average pooling as in the paper.

Relation to pytorch-ood 0.4.0 ``SCALE``: identical on a (B, D, 1, 1) input with
``percentile = p / 100``; its score is ``-kappa``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.constraints import PercentileBelow100
from oodbench.detectors._math import top_values
from oodbench.detectors._shaping import (
    keep_count,
    shaped_energy,
    sharpening,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class SCALE(Detector):
    """Energy of the head after scaling features by exp(total sum / top-k sum)."""

    percentile: PercentileBelow100 = 85.0

    name = "scale"
    requires = frozenset({"features", "head"})
    paper = "Xu, Chen, Franchi & Yao, ICLR 2024, arXiv 2310.00227"
    score_only_hyperparams = frozenset({"percentile"})

    def _shape(self, f: torch.Tensor) -> torch.Tensor:
        kept = top_values(f, keep_count(f.shape[1], self.percentile))
        return f * sharpening(f, kept)[:, None]

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self._shape, self.name)
