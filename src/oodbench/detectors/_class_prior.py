"""The in-distribution class prior of Jiang et al. (RP / RW scores), shared by its four detectors.

Jiang, Liu, Fang, Chen, Liu, Zheng & Han, "Detecting Out-of-distribution Data through
In-distribution Class Prior", ICML 2023, PMLR 202:15067-15088 (authors as in the proceedings
and the official README; checked against the official code, tmlr-group/class_prior @ dc1eb9c,
``funcs.py`` and ``test_ood.py``).

The prior is the training set's class frequencies, ``pi_c = n_c / N`` over the labelled rows of
the fit activations (``test_ood.py`` counts the labels of the ID training list). Two ways of
using it:

* **RP** (replace the uniform prior): a score that compares the softmax with the uniform
  distribution compares it with ``pi`` instead (``rp_msp``, ``rp_gradnorm``);
* **RW** (re-weight): a score is multiplied by ``1 - cos(p, pi)``, ``p = softmax(z)`` at T = 1,
  which is small when the prediction looks like the prior (an uninformative, OOD-like output)
  (``rw_energy``, ``rw_odin``).

On a balanced training set ``pi`` is uniform and RP equals the original score (tests therefore
fit on an imbalanced set). The paper's ImageNet results (and the leaderboard's RP+GradNorm row,
FPR95 73.53 on SUN) come from a ResNet-101 trained on the long-tailed ImageNet-LT-a8, where the
prior is far from uniform.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from oodbench.detectors._math import as_tensor
from oodbench.detectors._stats import labelled_rows
from oodbench.errors import EmptyInputError
from oodbench.extract.activations import Activations


def class_prior(train: Activations, who: str) -> np.ndarray:
    """``pi_c = n_c / N`` (float64, (C,)) from the labelled rows of ``train``."""
    try:
        rows = labelled_rows(train, who)
    except EmptyInputError as err:
        raise EmptyInputError(
            f"{who} fits the class prior pi from the training labels, but none of the "
            f"{len(train)} fit rows has a label >= 0: fit on the labelled ID training "
            "activations (extract them from a source with labels)"
        ) from err
    labels = np.asarray(train.labels)[rows]
    return np.bincount(labels, minlength=train.num_classes).astype(np.float64) / len(rows)


def prior_weight(logits: np.ndarray, prior: np.ndarray) -> torch.Tensor:
    """``1 - cos(softmax(z), pi)`` per row, float64 (N,): in [0, 1], 0 when p is parallel to pi."""
    p = torch.softmax(as_tensor(logits), dim=1)
    pi = torch.from_numpy(prior)
    return 1.0 - (p @ pi) / (p.norm(dim=1) * pi.norm())


class ClassPriorFit:
    """``_fit`` of the RP / RW detectors: ``prior_`` = the fit set's class frequencies.

    Mix in before ``Detector`` (``class RPMSP(ClassPriorFit, Detector)``).
    """

    prior_: np.ndarray

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        self.prior_ = class_prior(train, f"detector {getattr(self, 'name', '')!r}")
