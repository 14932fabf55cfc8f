"""RW-ODIN: ODIN's score re-weighted by the distance of the softmax from the class prior.

Jiang, Liu, Fang, Chen, Liu, Zheng & Han, "Detecting Out-of-distribution Data through
In-distribution Class Prior", ICML 2023 (checked against tmlr-group/class_prior @ dc1eb9c,
``funcs.py``, ``iterate_data_odin_custom``, lines 84-126):

    x'       = x - eps * s,   s = +1 where d L / d x >= 0, else -1      (funcs.py:109-114)
    kappa(x) = ODIN_{T, eps}(x) * (1 - cos(softmax(z(x)), pi))

``L = CE(z(x) / T, argmax z(x))``; ``ODIN_{T, eps}`` is the max softmax at T of the perturbed
input (:mod:`oodbench.detectors.odin`); the factor uses the softmax at T = 1 of the
*unperturbed* logits, read from the cached activations (the code computes it from the same
forward pass).

**The step** is the official one: a raw sign step on the network's input, the normalised
tensor (``torch.add(x.data, -epsilon, gradient)``, funcs.py:114, on images through
``test_ood.py``'s ``Normalize``), so ``input_std`` defaults to ``(1.0,)``. ODIN's own code (and
:class:`~oodbench.detectors.odin.ODIN`'s default, ``input_std=None``) divides the signed step by
the normalisation std, i.e. takes it in pixel units; ``input_std=None`` here gives that step.

Defaults: T = 1000 and eps = 0, the official script's (``test_ood.py``: ``--temperature_odin``
default 1000, ``--epsilon_odin`` default 0.0, lines 305-308, not set by ``test.sh``); ODIN's own
eps is 0.0014. With eps = 0 the step, whichever its scale, leaves the input unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from oodbench.constraints import NonNegative
from oodbench.detectors._class_prior import class_prior, prior_weight
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import register
from oodbench.detectors.odin import ODIN, InputStd
from oodbench.detectors.rp_msp import PAPER
from oodbench.extract.activations import Activations


@register
@dataclass
class RWODIN(ODIN):
    """ODIN's perturbed max softmax times 1 - cos(softmax, training class prior)."""

    epsilon: NonNegative = 0.0
    #: the official raw sign step (see the module docstring); None: ODIN's step / the std
    input_std: InputStd = (1.0,)

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
