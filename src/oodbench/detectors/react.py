"""ReAct: rectified (clipped) penultimate activations, scored with the energy of the head.

Sun, Guo & Li, "ReAct: Out-of-distribution Detection With Rectified Activations", NeurIPS 2021
(arXiv 2111.12797).

    c      = p-th percentile of all penultimate activations of the ID training set (p = 90)
    f'     = min(f(x), c)                      (element-wise)
    kappa  = logsumexp(W f' + b)               (negative energy, T = 1)

Defaults: ``percentile=90`` (the paper's ImageNet setting; percent, over the flattened
activations of every training sample and unit). ``threshold=c`` gives c directly instead (the
percentile is then unused): the parameter tau that Mondal et al. (arXiv 2602.05935, App. A)
search over the range of the ID activations.

Relation to pytorch-ood 0.4.0 ``ReAct``: it clips whatever its ``backbone`` returns (its
examples clip a feature map before pooling) and takes the percentile as a fraction; with the
penultimate features as backbone output, ``percentile=p/100`` and ``EnergyBased.score`` as
detector, its score is exactly ``-kappa``. We follow the paper and always clip the pooled
penultimate features. The threshold here is computed in float64 (pytorch-ood: ``np.percentile``
of float32 activations, a 1e-7 relative difference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch

from oodbench.constraints import Finite, Percentile
from oodbench.detectors._shaping import (
    percentile,
    required,
    shaped_energy,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class ReAct(Detector):
    """Energy of the head after clipping penultimate features at a training percentile."""

    percentile: Percentile = 90.0
    threshold: Annotated[float | None, Finite(note="None: the percentile of the fit features")] = None

    name = "react"
    requires = frozenset({"features", "head", "train"})
    paper = "Sun, Guo & Li, NeurIPS 2021, arXiv 2111.12797"

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.threshold_ = (float(self.threshold) if self.threshold is not None
                           else percentile(required(train, "features"), self.percentile))

    def shape(self, features: torch.Tensor) -> torch.Tensor:
        """min(f, c) for (B, D) float64 features, with the fitted threshold c."""
        return features.clamp(max=self.threshold_)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self.shape, self.name)
