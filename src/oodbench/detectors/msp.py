"""MSP: maximum softmax probability.

Hendrycks & Gimpel, "A Baseline for Detecting Misclassified and Out-of-Distribution Examples in
Neural Networks", ICLR 2017 (arXiv 1610.02136). The C-OOD paper's "softmax" kappa.

    kappa(x) = max_c softmax(z(x))_c

Computed as ``1 / (1 + s)`` with ``s`` the softmax mass of the other classes relative to the
top one (``_math.other_mass``: float32 exps, float64 result), so confident predictions keep
distinct float64 scores next to 1 instead of tying at 1.0. pytorch-ood ``MaxSoftmax`` returns
``-kappa``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.detectors._math import max_softmax
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class MSP(Detector):
    """Maximum softmax probability (the baseline; C-OOD 'softmax')."""

    name = "msp"
    requires = frozenset({"logits"})
    paper = "Hendrycks & Gimpel, ICLR 2017, arXiv 1610.02136"

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(len(acts), lambda rows: max_softmax(acts.logits[rows]), acts.num_classes)
