"""RP-MSP: the maximum softmax probability measured against the class prior.

Jiang et al., "Detecting Out-of-distribution Data through In-distribution Class Prior",
ICML 2023 (checked against tmlr-group/class_prior ``funcs.py``, ``iterate_data_msp_custom``):

    kappa(x) = max_c (softmax(z(x))_c - pi_c)

with ``pi`` the training set's class frequencies (:mod:`oodbench.detectors._class_prior`).
MSP is ``max_c p_c``, i.e. its distance from a uniform prior up to the constant 1/C.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._class_prior import ClassPriorFit
from oodbench.detectors._math import softmax
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations

PAPER = "Jiang et al., ICML 2023 (class prior), PMLR 202:15067-15088"


@register
@dataclass
class RPMSP(ClassPriorFit, Detector):
    """Largest gap between the softmax and the training class prior: max_c (p_c - pi_c)."""

    name = "rp_msp"
    requires = frozenset({"logits", "train"})
    paper = PAPER

    def _score(self, acts: Activations) -> np.ndarray:
        prior = torch.from_numpy(self.prior_)
        return by_chunks(
            len(acts), lambda rows: (softmax(acts.logits[rows]) - prior).max(dim=1).values
        )
