"""VRA+ in the parameterisation of the tuning paper: quantile thresholds and a lift; energy score.

The shaping function is VRA+ of Xu, Lian, Liu & Tao, "VRA: Variational Rectified Activation for
Out-of-distribution Detection", NeurIPS 2023 (arXiv 2302.11716), as Mondal, Xie, Duan, Wong &
Sundaramoorthi, "Tuning Out-of-Distribution (OOD) Detectors Without Given OOD Data" (arXiv
2602.05935), Appendix A ("VRA"), state it and tune it. Element-wise on the penultimate features z:

    VRA+(z) = 0          if z < alpha
              z + gamma  if alpha <= z <= beta
              beta       if z > beta
    kappa   = logsumexp(W VRA+(f) + b)          (negative energy, T = 1; App. A, "Optimization
                                                 Protocol": "energy-based scores after applying
                                                 the corresponding feature transformation")

with the thresholds at quantiles of the empirical ID feature distribution (App. A):

    alpha = F_ID^-1(eta_alpha),   beta = F_ID^-1(eta_beta),   eta_beta = eta_alpha + delta,
    delta = delta_min + u (delta_max - delta_min),   delta_min = 0.10,   delta_max = 0.99 - eta_alpha

so ``eta_beta = eta_alpha + 0.10 + u (0.89 - eta_alpha)`` lies in ``[eta_alpha + 0.10, 0.99]``
for every ``u`` in [0, 1]: the parameterisation keeps eta_beta > eta_alpha without a constraint,
which is why the paper optimises (eta_alpha, u, gamma) rather than (alpha, beta, gamma).

Readings where the text is open:

* F_ID is "the empirical ID feature distribution" (one distribution): the quantiles are taken
  over all entries of the ID training features pooled (``per_unit=False``, the default);
  ``per_unit=True`` takes them per unit, as the official VRA code's ``torch.quantile(.., dim=0)``.
* F^-1 is ``np.percentile``'s linear interpolation at ``100 * eta``.

Valid values (checked on construction): ``0 <= eta_alpha <= 0.89`` (above 0.89, delta_max <
delta_min and the construction no longer keeps eta_beta in range), ``0 <= u <= 1``, ``gamma``
finite. The paper's search box is narrower (eta_alpha in [0.1, 0.8], gamma in [0, 5]; see
``oodbench/tuning/spaces.toml``). Defaults: the paper publishes ranges, not a default, so the
defaults are the centre of its box (eta_alpha = 0.45, u = 0.5, gamma = 2.5): an untuned VRA+.
The piecewise function itself is :func:`oodbench.detectors.vra.vra` (shared with ``vra``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch

from oodbench.constraints import Bool, FiniteFloat, Interval
from oodbench.detectors._shaping import shaped_energy
from oodbench.detectors.base import Detector, register
from oodbench.detectors.vra import fit_thresholds, vra
from oodbench.extract.activations import Activations

#: delta_min and the ceiling of eta_beta, App. A of arXiv 2602.05935 (VRA and PLF alike)
DELTA_MIN = 0.10
QUANTILE_CEILING = 0.99


def upper_quantile(lower: float, u: float) -> float:
    """``lower + delta_min + u (delta_max - delta_min)`` with ``delta_max = 0.99 - lower``
    (App. A of arXiv 2602.05935: VRA's eta_beta, PLF's q2)."""
    return lower + DELTA_MIN + u * (QUANTILE_CEILING - lower - DELTA_MIN)


#: the lower quantile of the construction (VRA+'s eta_alpha, PLF's q1): in [0, 0.89], so that
#: the upper quantile stays in [lower + 0.10, 0.99]
LowerQuantile = Annotated[float, Interval(
    0, round(QUANTILE_CEILING - DELTA_MIN, 10),
    note=f"a quantile, a fraction not percent; above {QUANTILE_CEILING - DELTA_MIN:.2f} the upper "
         f"quantile lower + {DELTA_MIN:.2f} + u ({QUANTILE_CEILING - DELTA_MIN:.2f} - lower) would "
         f"leave [lower + {DELTA_MIN:.2f}, {QUANTILE_CEILING}]")]
#: where between its bounds the upper quantile lies
UpperShare = Annotated[float, Interval(0, 1, note="where between its bounds the upper quantile lies")]


@register
@dataclass
class VRAPlus(Detector):
    """VRA+ with thresholds at the ID quantiles eta_alpha and eta_alpha + 0.10 + u (0.89 - eta_alpha)."""

    eta_alpha: LowerQuantile = 0.45
    u: UpperShare = 0.5
    gamma: FiniteFloat = 2.5
    per_unit: Bool = False

    name = "vra_plus"
    requires = frozenset({"features", "head", "train"})
    paper = ("Xu, Lian, Liu & Tao, NeurIPS 2023, arXiv 2302.11716; parameterised as in Mondal et "
             "al., arXiv 2602.05935, App. A")
    score_only_hyperparams = frozenset({"gamma"})
    #: the box's centre, no published configuration (presets.toml: paper protocol unavailable)
    untuned_defaults = ("eta_alpha", "u", "gamma")

    @property
    def eta_beta(self) -> float:
        """The upper quantile, ``eta_alpha + 0.10 + u (0.89 - eta_alpha)``."""
        return upper_quantile(self.eta_alpha, self.u)

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.alpha_, self.beta_ = fit_thresholds(
            train, 100.0 * self.eta_alpha, 100.0 * self.eta_beta, self.per_unit
        )

    def shape(self, features: torch.Tensor) -> torch.Tensor:
        """VRA+ applied to (B, D) features, with the fitted thresholds."""
        return vra(features, self.alpha_, self.beta_, self.gamma)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self.shape, self.name)
