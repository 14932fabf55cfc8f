"""DICE: directed sparsification of the last layer, scored with the energy of the masked head.

Sun & Li, "DICE: Leveraging Sparsification for Out-of-Distribution Detection", ECCV 2022
(arXiv 2111.09805).

    m_j      = mean of unit j of the penultimate features over the ID training set
    V_cj     = W_cj * m_j                              (contribution of weight c, j)
    M_cj     = [V_cj > p-th percentile of all C x D contributions]
    kappa    = logsumexp((W * M) f + b)                (negative energy, T = 1; bias kept)

Defaults: ``sparsity=70`` (percent of the weights dropped; the paper's p = 0.7 for ImageNet,
0.9 for CIFAR). ``react_percentile`` (default ``None``) combines DICE with ReAct as in the
paper's DICE + ReAct row: the features are clipped at that percentile of all training
activations before the masked head; the contributions ``m_j`` stay those of the unclipped
training features, as in the official code.

Relation to pytorch-ood 0.4.0 ``DICE``: same mask (``torch.quantile`` of the contributions with
``p = sparsity / 100``, strict ``>``), same head; its score is ``-kappa`` (without ReAct).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np

from oodbench.constraints import Interval, PercentileBelow100
from oodbench.detectors._math import as_tensor
from oodbench.detectors._shaping import (
    check_feature_dim,
    head_energy,
    head_tensors,
    percentile,
    required,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class DICE(Detector):
    """Energy of the head after dropping the weights with the smallest mean contribution."""

    sparsity: PercentileBelow100 = 70.0
    react_percentile: Annotated[float | None, Interval(
        0, 100, note="a percentile, in percent; None: no clipping")] = None

    name = "dice"
    requires = frozenset({"features", "head", "train"})
    paper = "Sun & Li, ECCV 2022, arXiv 2111.09805"

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        features = required(train, "features")
        weight, self.bias_ = head_tensors(train)
        check_feature_dim(features, weight, self.name)
        mean = as_tensor(np.asarray(np.mean(features, axis=0, dtype=np.float64)))
        contribution = weight * mean[None, :]
        cut = np.percentile(contribution.numpy(), self.sparsity)
        self.masked_weight_ = weight * (contribution > cut)
        self.clip_ = (
            None if self.react_percentile is None else percentile(features, self.react_percentile)
        )

    def _score(self, acts: Activations) -> np.ndarray:
        features = required(acts, "features")
        check_feature_dim(features, self.masked_weight_, self.name)
        clip = self.clip_
        shape = None if clip is None else (lambda f: f.clamp(max=clip))
        return head_energy(features, self.masked_weight_, self.bias_, shape)
