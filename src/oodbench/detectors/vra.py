"""VRA: variational rectified activation (suppress low and high, lift the middle); energy score.

Xu, Lian, Liu & Tao, "VRA: Variational Rectified Activation for Out-of-distribution Detection",
NeurIPS 2023 (arXiv 2302.11716).

Element-wise on the penultimate features z, with thresholds alpha < beta taken from the ID
training features:

    VRA(z) = 0          if z < alpha          (alpha instead, with ``clip_low=True``)
             z + gamma  if alpha <= z <= beta
             beta       if z > beta
    kappa  = logsumexp(W VRA(f) + b)          (negative energy, T = 1)

``gamma = 0`` is VRA; ``gamma > 0`` is the paper's VRA+ (which lifts the kept middle range).
This is the piecewise function of the paper and of the official code (``--case clip2``; values
above beta become beta, not beta + gamma). ``clip_low=True`` is the two-sided clip of OpenOOD's
``VRAPostprocessor`` and pytorch-ood (values below alpha become alpha).

Thresholds: ``alpha`` / ``beta`` are the ``lower_percentile`` / ``upper_percentile`` percentiles
of the training features, per unit (``per_unit=True``, as the official code's
``torch.quantile(features, q, dim=0)``) or over all units together (``per_unit=False``, as
OpenOOD). Defaults: 60 / 90, gamma 0, per unit: the official CIFAR-10 VRA setting (q1 = 0.6,
q2 = 0.9); for ImageNet ResNet-50 the official scripts pass absolute thresholds (0.5 and 1.0),
which are model-specific and therefore not a default here.

Presets: ``preset="openood"`` is OpenOOD v1.5's VRA: global 10 / 90 percentiles of the ID-val
activations and the two-sided clip (``per_unit=False, clip_low=True, fit_data="id_val"``).

Relation to pytorch-ood 0.4.0 ``VRA``: it clips to [alpha, beta] with per-element quantiles;
with ``clip_low=True`` (and gamma = 0) its score is exactly ``-kappa``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oodbench.detectors._math import as_tensor
from oodbench.detectors._shaping import (
    check_percentile,
    percentile,
    percentile_per_unit,
    required,
    shaped_energy,
)
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations


def vra(
    z: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, gamma: float, clip_low: bool = False
) -> torch.Tensor:
    """The VRA piecewise function (broadcasting thresholds over rows); ``clip_low`` maps values
    below alpha to alpha instead of 0."""
    low = alpha if clip_low else torch.zeros_like(alpha)
    return torch.where(z < alpha, low, torch.where(z > beta, beta, z + gamma))


@register
@dataclass
class VRA(Detector):
    """Energy after zeroing low activations, clipping high ones and lifting the middle by gamma."""

    lower_percentile: float = 60.0
    upper_percentile: float = 90.0
    gamma: float = 0.0
    per_unit: bool = True
    clip_low: bool = False

    name = "vra"
    requires = frozenset({"features", "head", "train"})
    paper = "Xu, Lian, Liu & Tao, NeurIPS 2023, arXiv 2302.11716"
    score_only_hyperparams = frozenset({"gamma", "clip_low"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_percentile(self.lower_percentile, "VRA lower_percentile")
        check_percentile(self.upper_percentile, "VRA upper_percentile")
        if self.lower_percentile > self.upper_percentile:
            raise InvalidInputError(
                f"VRA needs lower_percentile <= upper_percentile; got {self.lower_percentile} "
                f"and {self.upper_percentile}"
            )

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        features = required(train, "features")
        if self.per_unit:
            self.alpha_ = as_tensor(percentile_per_unit(features, self.lower_percentile))
            self.beta_ = as_tensor(percentile_per_unit(features, self.upper_percentile))
        else:
            lower = percentile(features, self.lower_percentile)
            upper = percentile(features, self.upper_percentile)
            self.alpha_ = torch.tensor(lower, dtype=torch.float64)
            self.beta_ = torch.tensor(upper, dtype=torch.float64)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(
            acts, lambda f: vra(f, self.alpha_, self.beta_, self.gamma, self.clip_low), self.name
        )
