"""RW-Energy: the negative free energy re-weighted by the distance of the softmax from the prior.

Jiang et al., "Detecting Out-of-distribution Data through In-distribution Class Prior",
ICML 2023 (checked against tmlr-group/class_prior ``funcs.py``, ``iterate_data_energy_custom``):

    kappa(x) = T log sum_c exp(z_c / T) * (1 - cos(softmax(z), pi))

The factor is the one of :func:`oodbench.detectors._class_prior.prior_weight` (softmax at
T = 1, as in the code); the score it multiplies is the *negative* energy ``-E`` that
:mod:`oodbench.detectors.energy` returns (higher = more ID), as the code's ``conf``.

**Sign.** The re-weighting assumes ``-E > 0``, which holds for typical trained networks (the
largest logit is positive). Where ``-E < 0`` the factor in [0, 1] moves the score *up*,
towards 0, for prior-like (OOD-looking) predictions: the opposite of its purpose. The score is
the published one regardless; ``negative_energies_`` counts such rows of the last ``score``
call so a user can see whether it happened.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.constraints import Positive
from oodbench.detectors._class_prior import ClassPriorFit, prior_weight
from oodbench.detectors._math import neg_energy
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.detectors.rp_msp import PAPER
from oodbench.extract.activations import Activations


@register
@dataclass
class RWEnergy(ClassPriorFit, Detector):
    """Negative energy times 1 - cos(softmax, training class prior)."""

    temperature: Positive = 1.0

    name = "rw_energy"
    requires = frozenset({"logits", "train"})
    paper = PAPER
    score_only_hyperparams = frozenset({"temperature"})

    def _score(self, acts: Activations) -> np.ndarray:
        energy = by_chunks(len(acts), lambda rows: neg_energy(acts.logits[rows], self.temperature),
                           acts.num_classes)
        self.negative_energies_ = int((energy < 0).sum())
        weight = by_chunks(len(acts), lambda rows: prior_weight(acts.logits[rows], self.prior_),
                           acts.num_classes)
        return energy * weight
