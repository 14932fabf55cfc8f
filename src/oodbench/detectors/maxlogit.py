"""MaxLogit: the largest logit.

Hendrycks, Basart, Mazeika, Zou, Kwon, Mostajabi, Steinhardt & Song, "Scaling Out-of-Distribution
Detection for Real-World Settings", ICML 2022 (arXiv 1911.11132).

    kappa(x) = max_c z_c(x)

No hyper-parameters. pytorch-ood 0.4.0 ``MaxLogit.score`` returns ``-kappa`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class MaxLogit(Detector):
    """Maximum logit (MLS)."""

    name = "maxlogit"
    requires = frozenset({"logits"})
    paper = "Hendrycks et al., ICML 2022, arXiv 1911.11132"

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(len(acts), lambda rows: np.max(acts.logits[rows], axis=1))
