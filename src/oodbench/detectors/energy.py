"""Energy: the negative free energy of the logits.

Liu, Wang, Owens & Li, "Energy-based Out-of-distribution Detection", NeurIPS 2020
(arXiv 2010.03759).

    kappa(x) = -E(x; T) = T * log sum_c exp(z_c(x) / T)

Default ``temperature=1`` (the paper's choice for post-hoc scoring). pytorch-ood 0.4.0
``EnergyBased.score(logits, t)`` returns ``E = -kappa`` exactly. Computed as
``max z + T log S`` (``_math.neg_energy``: float32 exps, float64 result; within about ``1e-7 T``
of an all-float64 computation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.constraints import Positive
from oodbench.detectors._math import neg_energy
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class Energy(Detector):
    """Negative energy T * logsumexp(z / T)."""

    name = "energy"
    requires = frozenset({"logits"})
    paper = "Liu et al., NeurIPS 2020, arXiv 2010.03759"
    score_only_hyperparams = frozenset({"temperature"})

    temperature: Positive = 1.0

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(
            len(acts), lambda rows: neg_energy(acts.logits[rows], self.temperature), acts.num_classes
        )
