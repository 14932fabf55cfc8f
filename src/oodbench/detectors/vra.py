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

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oodbench.constraints import Bool, Check, FiniteFloat, Percentile
from oodbench.detectors._math import as_tensor
from oodbench.detectors._shaping import (
    percentile,
    percentile_per_unit,
    required,
    shaped_energy,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


def vra(
    z: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, gamma: float, clip_low: bool = False
) -> torch.Tensor:
    """The VRA piecewise function (broadcasting thresholds over rows) in ``z``'s precision, on
    its device, equal to the float64 result rounded to that precision. ``clip_low`` maps values
    below alpha to alpha instead of 0.

    The comparisons with the float64 thresholds decide jumps, so they must be exact: with
    ``alpha`` rounded up and ``beta`` rounded down to ``z``'s precision (``outward_thresholds``),
    ``z < alpha`` and ``z > beta`` hold exactly when they hold in float64. Values set to alpha or
    beta get them rounded to nearest, and ``z + gamma`` is summed in float64 (VRA+), as the
    float64 result cast to ``z``'s precision. For gamma = 0 the clipping is ``min(z, beta)`` (and
    ``max(z, alpha)``) with the thresholds rounded to nearest: the same for every ``z`` of that
    precision, since none lies strictly between a threshold and its nearest value. Zeroing below
    alpha multiplies by the 0/1 mask (a -inf feature gives NaN, which ``score`` reports).
    """
    alpha, beta = alpha.to(z.device), beta.to(z.device)
    alpha_up, beta_down = outward_thresholds(alpha, beta, z.dtype)
    alpha_near, beta_near = alpha.to(z.dtype), beta.to(z.dtype)
    if gamma == 0.0:
        shaped = z.clamp(min=alpha_near if clip_low else None, max=beta_near)
    else:
        shaped = torch.where(z > beta_down, beta_near, (z.double() + gamma).to(z.dtype))
        if clip_low:
            shaped = torch.where(z < alpha_up, alpha_near, shaped)
    return shaped if clip_low else shaped.mul_(z >= alpha_up)


def outward_thresholds(
    lower: torch.Tensor, upper: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``lower`` rounded up and ``upper`` rounded down to ``dtype``: for any ``z`` of that
    precision, ``z < lower`` and ``z > upper`` then hold exactly as against the originals."""
    up, down = lower.to(dtype), upper.to(dtype)
    up = torch.where(up.to(lower.dtype) < lower, torch.nextafter(up, up.new_tensor(torch.inf)), up)
    down = torch.where(down.to(upper.dtype) > upper, torch.nextafter(down, down.new_tensor(-torch.inf)), down)
    return up, down


#: the thresholds' percentiles in order (VRA, PLF's fold)
ORDERED_PERCENTILES = Check(("lower_percentile", "upper_percentile"), operator.le,
                            "lower_percentile <= upper_percentile")


def fit_thresholds(
    train: Activations, lower_percentile: float, upper_percentile: float, per_unit: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (lower, upper) percentiles of the training features as float64 tensors: per unit,
    shape (D,), or over all entries, scalars (VRA's alpha / beta, PLF's t1 / t2)."""
    features = required(train, "features")
    if per_unit:
        return (as_tensor(percentile_per_unit(features, lower_percentile)),
                as_tensor(percentile_per_unit(features, upper_percentile)))
    return (torch.tensor(percentile(features, lower_percentile), dtype=torch.float64),
            torch.tensor(percentile(features, upper_percentile), dtype=torch.float64))


@register
@dataclass
class VRA(Detector):
    """Energy after zeroing low activations, clipping high ones and lifting the middle by gamma."""

    lower_percentile: Percentile = 60.0
    upper_percentile: Percentile = 90.0
    gamma: FiniteFloat = 0.0
    per_unit: Bool = True
    clip_low: Bool = False

    name = "vra"
    requires = frozenset({"features", "head", "train"})
    paper = "Xu, Lian, Liu & Tao, NeurIPS 2023, arXiv 2302.11716"
    score_only_hyperparams = frozenset({"gamma", "clip_low"})
    checks = (ORDERED_PERCENTILES,)

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.alpha_, self.beta_ = fit_thresholds(
            train, self.lower_percentile, self.upper_percentile, self.per_unit
        )

    def shape(self, features: torch.Tensor) -> torch.Tensor:
        """VRA applied to (B, D) features, with the fitted thresholds."""
        return vra(features, self.alpha_, self.beta_, self.gamma, self.clip_low)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self.shape, self.name)
