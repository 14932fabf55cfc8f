"""RW-ODIN: ODIN's score re-weighted by the distance of the softmax from the class prior.

Jiang et al., "Detecting Out-of-distribution Data through In-distribution Class Prior",
ICML 2023 (checked against XueJiang16/class_prior ``funcs.py``, ``iterate_data_odin_custom``):

    kappa(x) = ODIN_{T, eps}(x) * (1 - cos(softmax(z(x)), pi))

``ODIN_{T, eps}`` is :mod:`oodbench.detectors.odin` (max softmax at T of the perturbed input);
the factor uses the softmax at T = 1 of the *unperturbed* logits, read from the cached
activations (the code computes it from the same forward pass). Defaults: T = 1000 and eps = 0,
the official script's (``test_ood.py``: ``--temperature_odin 1000``, ``--epsilon_odin`` 0 by
default and not set by ``test.sh``); ODIN's own eps is 0.0014.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from oodbench.detectors._class_prior import class_prior, prior_weight
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import register
from oodbench.detectors.odin import ODIN
from oodbench.detectors.rp_msp import PAPER
from oodbench.extract.activations import Activations


@register
@dataclass
class RWODIN(ODIN):
    """ODIN's perturbed max softmax times 1 - cos(softmax, training class prior)."""

    epsilon: float = 0.0

    name = "rw_odin"
    requires = frozenset({"model", "logits", "train"})
    paper = PAPER

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        super()._fit(train, model)
        self.prior_ = class_prior(train, f"detector {self.name!r}")

    def _score(self, acts: Activations) -> np.ndarray:
        weight = by_chunks(len(acts), lambda rows: prior_weight(acts.logits[rows], self.prior_),
                           acts.num_classes)
        return super()._score(acts) * weight
