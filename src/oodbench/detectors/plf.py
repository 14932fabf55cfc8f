"""PLF: piecewise-linear activation shaping (zero the low range, keep the middle, fold the top
down); energy score.

Mondal, Jiang & Sundaramoorthi, "A Variational Information Theoretic Approach to
Out-of-Distribution Detection", ICML 2025 (arXiv 2506.14194), which derives shaping functions
from an information-theoretic loss (a KL term separating ID and OOD feature distributions plus
an Information Bottleneck term) and proposes a new piecewise-linear one; evaluated as "PLF" in
Mondal, Xie, Duan, Wong & Sundaramoorthi, "Tuning Out-of-Distribution (OOD) Detectors Without
Given OOD Data" (arXiv 2602.05935), as a higher-parameter family next to VRA.

Element-wise on the penultimate features z, with thresholds t1 <= t2 taken from the ID training
features and a fold slope s >= 0:

    PLF(z) = 0                          if z < t1
             z                          if t1 <= z <= t2
             max(t2 - s (z - t2), 0)    if z > t2
    kappa  = logsumexp(W PLF(f) + b)          (negative energy, T = 1)

``t1`` / ``t2`` are the ``lower_percentile`` / ``upper_percentile`` percentiles of the training
features, per unit (``per_unit=True``) or over all units (``per_unit=False``), exactly as VRA's
alpha / beta. The middle keeps the activation; above the knee t2 the function falls linearly
with slope -s and reaches 0 at ``t2 (1 + 1/s)``: abnormally high activations, typical of OOD
inputs, are suppressed instead of merely clipped. Special cases: ``slope=0`` is VRA with
gamma = 0; ``lower_percentile=0, slope=0, per_unit=False`` is ReAct at ``upper_percentile``
(tested).

**Provenance of this definition.** Only the abstracts of the two papers could be read where this
detector was written (their full texts were not reachable), so the parameterisation above is
ours, not a transcription of the paper's equation: a piecewise-linear function of the kind VRA's
variational analysis motivates (suppress low and abnormally high activations, keep the
intermediate ones), with a slope so that activations above the knee are lowered rather than
clipped. The paper's exact knots, slopes and default values may differ. Defaults here: 60 / 90
(VRA's official CIFAR setting) and ``slope=1`` (our choice). Tune them (``oodbench.tune`` with
``search="tpe"``: three continuous hyper-parameters), and check against the paper's equation
before putting PLF numbers next to published ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oodbench.detectors._shaping import shaped_energy
from oodbench.detectors.base import Detector, register
from oodbench.detectors.vra import check_thresholds, fit_thresholds
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations


def plf(z: torch.Tensor, lower: torch.Tensor, knee: torch.Tensor, slope: float) -> torch.Tensor:
    """The PLF piecewise function (thresholds broadcast over rows)."""
    folded = torch.clamp(knee - slope * (z - knee), min=0.0)
    return torch.where(z < lower, 0.0, torch.where(z > knee, folded, z))


@register
@dataclass
class PLF(Detector):
    """Energy after zeroing low activations and folding those above a knee down to zero."""

    lower_percentile: float = 60.0
    upper_percentile: float = 90.0
    slope: float = 1.0
    per_unit: bool = True

    name = "plf"
    requires = frozenset({"features", "head", "train"})
    paper = "Mondal, Jiang & Sundaramoorthi, ICML 2025, arXiv 2506.14194"
    score_only_hyperparams = frozenset({"slope"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_thresholds("PLF", self.lower_percentile, self.upper_percentile)
        if not self.slope >= 0.0:
            raise InvalidInputError(f"PLF slope must be >= 0 (0 = clip at the knee); got {self.slope}")

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.lower_, self.knee_ = fit_thresholds(
            train, self.lower_percentile, self.upper_percentile, self.per_unit
        )

    def shape(self, features: torch.Tensor) -> torch.Tensor:
        """PLF applied to (B, D) float64 features, with the fitted thresholds."""
        return plf(features, self.lower_, self.knee_, self.slope)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self.shape, self.name)
