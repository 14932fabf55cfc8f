"""KL-Matching: KL divergence of the softmax to the closest class-typical softmax.

Hendrycks, Basart, Mazeika, Zou, Kwon, Mostajabi, Steinhardt & Song, "Scaling Out-of-Distribution
Detection for Real-World Settings", ICML 2022 (arXiv 1911.11132).

Fit (no labels needed): for every class k that the model predicts on the fit set, the template
``d_k`` is the mean softmax of the fit samples predicted as k. Score:

    kappa(x) = -min_k KL[p(x) || d_k] = max_k sum_c p_c log d_kc - sum_c p_c log p_c

with the minimum over the classes predicted at least once on the fit set. The paper fits on
held-out ID validation data, and so does OpenOOD (``fit_data="id_val"``, the default); every row
of the fit activations is used (labels are ignored). Computed in float64, chunked over rows.

A class the model never predicts on the fit data has no template: the data cannot determine it,
so it is left out of the minimum and ``fit`` warns with the number of such classes (OpenOOD puts
a one-hot template there, whose KL to any softmax with two non-zero entries is infinite: the
same minimum). A fit set much smaller than the number of classes leaves most classes out.

pytorch-ood 0.4.0 ``KLMatching`` (``fit_logits`` then ``predict_logits``) returns
``min_k KL = -kappa``; it drops fit rows with label < 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import log_softmax, row_max, softmax
from oodbench.detectors._stats import (
    by_chunks,
    chunks,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class KLMatching(Detector):
    """Negative KL divergence to the nearest class-conditional mean softmax."""

    name = "klm"
    requires = frozenset({"logits", "train"})
    paper = "Hendrycks et al., ICML 2022, arXiv 1911.11132"
    default_fit_data = "id_val"

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        num_classes = train.num_classes
        sums = torch.zeros(num_classes, num_classes, dtype=torch.float64)
        counts = torch.zeros(num_classes, dtype=torch.int64)
        for rows in chunks(len(train)):
            p = softmax(train.logits[rows])
            pred = row_max(p)[1][:, 0]
            sums.index_add_(0, pred, p)
            counts += torch.bincount(pred, minlength=num_classes)
        present = counts > 0
        templates = sums[present] / counts[present].unsqueeze(1)
        # log 0 (an underflowed template entry) -> most negative float: p > 0 there gives KL ~ inf
        self.log_templates_ = templates.log().nan_to_num(neginf=torch.finfo(torch.float64).min)
        self.template_classes_ = np.flatnonzero(present.numpy())
        missing = num_classes - self.template_classes_.size
        if missing:
            warnings.warn(
                f"detector {self.name!r}: {missing} of {num_classes} classes are never predicted "
                f"on the {len(train)} fit rows, so they have no template and are left out of "
                "the minimum; fit on more held-out ID data to cover them",
                stacklevel=3,
            )

    def _score(self, acts: Activations) -> np.ndarray:
        return by_chunks(len(acts), lambda rows: self._chunk(acts.logits[rows]))

    def _chunk(self, logits: np.ndarray) -> torch.Tensor:
        log_p = log_softmax(logits)
        p = log_p.exp()
        return (p @ self.log_templates_.T).max(dim=1).values - (p * log_p).sum(dim=1)
