"""MSP: maximum softmax probability.

Hendrycks & Gimpel, "A Baseline for Detecting Misclassified and Out-of-Distribution Examples in
Neural Networks", ICLR 2017 (arXiv 1610.02136). The C-OOD paper's "softmax" kappa.

    kappa(x) = max_c softmax(z(x))_c

pytorch-ood ``MaxSoftmax`` returns ``-kappa``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.detectors._math import softmax
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
        return softmax(acts.logits).max(dim=1).values.numpy()
