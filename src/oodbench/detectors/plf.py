"""PLF, oodbench's reading: a seven-parameter piecewise-linear shaping function; energy score.
And ``plf_fold``, oodbench's earlier three-parameter function, kept as a named special case.

PLF is the shaping function of Mondal, Jiang & Sundaramoorthi, "A Variational Information
Theoretic Approach to Out-of-Distribution Detection", ICML 2025 (arXiv 2506.14194), as Mondal,
Xie, Duan, Wong & Sundaramoorthi, "Tuning Out-of-Distribution (OOD) Detectors Without Given OOD
Data" (arXiv 2602.05935), Appendix A ("PLF") parameterise and tune it. **What is implemented here
is oodbench's reading of PLF, not a transcription of its source**: the function is defined in
arXiv 2506.14194, whose method section could not be read where this was written (the stored
copies of that paper hold its abstract and the start of its introduction only, and no code by
its authors was found), so the way the seven parameters join into f is inferred from App. A's
wording of 2602.05935. What App. A states (re-stated):

* f consists of three linear segments, defined by breakpoints x1, x2, slopes m1, m2 and vertical
  offsets (y_start, y_end, y1);
* the breakpoints are quantiles of the *absolute* ID features, ``x1 = F_|Z_ID|^-1(q1)``,
  ``x2 = F_|Z_ID|^-1(q2)``, with ``q2 = q1 + delta``, ``delta = 0.10 + u (0.99 - q1 - 0.10)``;
* the optimisation variables are (y_start, y_end, Delta_y, q1, u, m1, m2) with
  ``y1 = y_end + Delta_y``; y_start in [-5, 0], y_end in [0, 5], Delta_y in [0, 5],
  q1 in [0.1, 0.8], u in [0, 1], m1 in [0, 5], m2 in [-5, 5];
* the score is the energy after the feature transformation ("Optimization Protocol").

**oodbench's reading where App. A leaves the function open** (not checked against arXiv
2506.14194's equations; if that text is read and differs, this function changes):

1. How the seven parameters join into f (a = |z|)::

       f(a) = y_start + m1 a                              a <  x1
              y1 + (y_end - y1) (a - x1) / (x2 - x1)     x1 <= a <= x2
              y_end + m2 (a - x2)                        a >  x2

   Three segments but only two free slopes means one segment is fixed by its end values; the
   offsets name the value where the first segment starts (y_start, at a = 0), the value at x1
   (y1, the index it shares with x1) and the value at x2 where the last segment starts (y_end).
   So the middle segment joins (x1, y1) to (x2, y_end), the outer ones leave y_start and y_end
   with slopes m1 and m2. f is continuous at x2 and may jump at x1. With App. A's ranges this
   is the family "start at or below zero, rise (m1 >= 0), peak at x1 (y1 >= y_end), fall to
   y_end over the middle, then any slope": a generalisation of VRA's suppress-low / keep-middle
   / cap-high shape that can start negative and can rise again at the top.
   Where x1 == x2 (tied quantiles, e.g. the many zeros of post-ReLU features) the middle
   segment is the single point a = x1, valued y1.

2. Whether f multiplies or replaces z: it *replaces* it, ``z' = f(|z|)``, as ReAct's
   ``min(z, tau)`` and VRA's piecewise function replace z in the same appendix ("PLF applies a
   ... shaping function to features", worded as for VRA). For the tuning paper's networks (ResNet-18/50,
   MobileNet-V2: post-ReLU pooled features) |z| = z; for signed features f(|z|) is applied as
   written (an even function of z).

Further choices: the quantiles pool every entry of the ID training features (App. A's
"absolute ID features", one distribution; ``per_unit=True`` takes them per unit instead);
F^-1 is ``np.percentile``'s linear interpolation at 100 q. Valid values (checked on
construction): ``0 <= q1 <= 0.89``, ``0 <= u <= 1``, every other parameter finite; App. A's
narrower box is the ``"paper"`` search space (``oodbench/tuning/spaces.toml``). Defaults: App. A
publishes the box, not a default, so the defaults are its centre (y_start = -2.5, y_end = 2.5,
Delta_y = 2.5, q1 = 0.45, u = 0.5, m1 = 2.5, m2 = 0): an untuned reading; tune it
(``oodbench.tune("plf", "paper", ..., search="gp")``).

**plf_fold** (oodbench's function of the same name before App. A could be read): zero below t1,
identity up to t2, a falling line of slope -s above, floored at 0, with t1, t2 the
``lower_percentile`` / ``upper_percentile`` percentiles of the raw (not absolute) training
features, per unit by default. It is the three-segment function above evaluated on z (not |z|)
with ``y_start = m1 = 0``, ``y1 = t1``, ``y_end = t2``, ``m2 = -s`` (so Delta_y = t1 - t2 <= 0,
outside App. A's box), with the last segment floored at 0 (tested). Special cases: ``slope=0``
is VRA with gamma = 0; ``lower_percentile=0, slope=0, per_unit=False`` is ReAct. It is not PLF
(in any reading) and has no published configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch

from oodbench.constraints import Bool, FiniteFloat, Interval, Percentile
from oodbench.detectors._math import as_tensor
from oodbench.detectors._shaping import percentile, percentile_per_unit, required, shaped_energy
from oodbench.detectors.base import Detector, register
from oodbench.detectors.vra import ORDERED_PERCENTILES, fit_thresholds
from oodbench.detectors.vra_plus import LowerQuantile, UpperShare, upper_quantile
from oodbench.extract.activations import Activations

Threshold = torch.Tensor | float


def three_segments(a: torch.Tensor, x1: Threshold, x2: Threshold, y_start: float, m1: float,
                   y1: Threshold, y_end: Threshold, m2: float) -> torch.Tensor:
    """The three-segment function of the module docstring at ``a`` (float64); breakpoints and
    the offsets y1, y_end broadcast over rows (scalars or (D,) tensors)."""
    x1_t, x2_t, y1_t, y_end_t = (torch.as_tensor(v, dtype=torch.float64, device=a.device)
                                 for v in (x1, x2, y1, y_end))
    width = x2_t - x1_t
    mid_slope = torch.where(width > 0, (y_end_t - y1_t) / torch.where(width > 0, width, 1.0), 0.0)
    return torch.where(a < x1_t, y_start + m1 * a,
                       torch.where(a <= x2_t, y1_t + mid_slope * (a - x1_t),
                                   y_end_t + m2 * (a - x2_t)))


def absolute_quantiles(train: Activations, q1: float, q2: float, per_unit: bool
                       ) -> tuple[Threshold, Threshold]:
    """The ``q1`` and ``q2`` quantiles (fractions) of the absolute training features, pooled
    (floats) or per unit ((D,) float64 tensors). Non-negative features are used as they are."""
    features = required(train, "features")
    if float(np.min(features)) < 0.0:
        features = np.abs(features)
    if per_unit:
        return (as_tensor(percentile_per_unit(features, 100.0 * q1)),
                as_tensor(percentile_per_unit(features, 100.0 * q2)))
    return percentile(features, 100.0 * q1), percentile(features, 100.0 * q2)


@register
@dataclass
class PLF(Detector):
    """Energy after oodbench's reading of PLF: the seven-parameter piecewise-linear shaping of
    App. A (arXiv 2602.05935), joined as the module docstring states (not checked against the
    function's source, arXiv 2506.14194, which could not be read)."""

    y_start: FiniteFloat = -2.5
    y_end: FiniteFloat = 2.5
    delta_y: FiniteFloat = 2.5
    q1: LowerQuantile = 0.45
    u: UpperShare = 0.5
    m1: FiniteFloat = 2.5
    m2: FiniteFloat = 0.0
    per_unit: Bool = False

    name = "plf"
    requires = frozenset({"features", "head", "train"})
    paper = ("oodbench's reading of PLF (Mondal, Jiang & Sundaramoorthi, ICML 2025, arXiv "
             "2506.14194, not read) in the parameterisation of Mondal et al., arXiv 2602.05935, "
             "App. A")
    score_only_hyperparams = frozenset({"y_start", "y_end", "delta_y", "m1", "m2"})
    #: the box's centre, no published configuration (presets.toml: paper protocol unavailable)
    untuned_defaults = ("y_start", "y_end", "delta_y", "q1", "u", "m1", "m2")

    @property
    def q2(self) -> float:
        """The upper breakpoint's quantile, ``q1 + 0.10 + u (0.89 - q1)``."""
        return upper_quantile(self.q1, self.u)

    @property
    def y1(self) -> float:
        """The value at x1, ``y_end + delta_y``."""
        return self.y_end + self.delta_y

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.x1_, self.x2_ = absolute_quantiles(train, self.q1, self.q2, self.per_unit)

    def shape(self, features: torch.Tensor) -> torch.Tensor:
        """f(|z|) for (B, D) features (float64), with the fitted breakpoints."""
        return three_segments(features.abs().double(), self.x1_, self.x2_, self.y_start,
                              self.m1, self.y1, self.y_end, self.m2)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self.shape, self.name)


@register
@dataclass
class PLFFold(Detector):
    """oodbench's earlier three-parameter function: zero, identity, a fold down to zero."""

    lower_percentile: Percentile = 60.0
    upper_percentile: Percentile = 90.0
    slope: Annotated[float, Interval(0, None, note="0 = clip at the knee")] = 1.0
    per_unit: Bool = True

    name = "plf_fold"
    requires = frozenset({"features", "head", "train"})
    paper = "oodbench's special case of PLF (see plf.py); not a published detector"
    score_only_hyperparams = frozenset({"slope"})
    checks = (ORDERED_PERCENTILES,)

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.lower_, self.knee_ = fit_thresholds(
            train, self.lower_percentile, self.upper_percentile, self.per_unit
        )

    def shape(self, features: torch.Tensor) -> torch.Tensor:
        """The fold applied to (B, D) features (float64), with the fitted thresholds: the
        three segments on z with y_start = m1 = 0, y1 = t1, y_end = t2, m2 = -slope, the last
        floored at 0."""
        z = features.double()
        t1, t2 = self.lower_.to(z.device), self.knee_.to(z.device)
        shaped = three_segments(z, t1, t2, 0.0, 0.0, t1, t2, -self.slope)
        return torch.where(z > t2, shaped.clamp(min=0.0), shaped)

    def _score(self, acts: Activations) -> np.ndarray:
        return shaped_energy(acts, self.shape, self.name)
