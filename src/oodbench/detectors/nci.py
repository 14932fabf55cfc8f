"""NCI: neural-collapse-inspired proximity to the predicted class's weight vector plus a norm filter.

Liu & Qin, "Detecting Out-of-Distribution through the Lens of Neural Collapse", CVPR 2025
(arXiv 2311.01479, https://github.com/litianliu/NCI-OOD, integrated into OpenOOD).

With ``mu_G`` the mean training feature (fit; labels not used), ``y`` the predicted class and
``w_y`` its head row:

    pScore(x) = w_y^T (f(x) - mu_G) / ||f(x) - mu_G||_2
    kappa(x)  = pScore(x) + alpha * ||f(x)||_1

This is the authors' code (OpenOOD ``NCIPostprocessor``). The paper motivates pScore as the
cosine between ``f - mu_G`` and ``w_y``; the code does not divide by ``||w_y||`` (under neural
collapse the head rows have equal norms, so the two agree up to a constant) and we follow the
code. Uncertain: the paper tunes alpha on validation data (OpenOOD sweeps 1e-4 ... 0.1); the
default ``alpha=1e-4`` is OpenOOD's configured value, not a number we could read in the paper.
Float64, chunked.

pytorch-ood 0.4.0 ``NCI(encoder, head, alpha)`` (``fit_features`` then ``predict_features``)
returns ``-kappa`` (float32; with ``alpha=0`` both drop the norm term, and pytorch-ood also
drops it for negative alpha).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.constraints import FiniteFloat
from oodbench.detectors._math import as_tensor
from oodbench.detectors._stats import TrainMeanFit, by_chunks, features_of, head_of
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class NCI(TrainMeanFit, Detector):
    """Alignment of the centred features with the predicted class's weight, plus alpha * L1 norm."""

    name = "nci"
    requires = frozenset({"features", "logits", "head", "train"})
    paper = "Liu & Qin, CVPR 2025, arXiv 2311.01479"
    score_only_hyperparams = frozenset({"alpha"})

    alpha: FiniteFloat = 1e-4

    def _score(self, acts: Activations) -> np.ndarray:
        weight = as_tensor(head_of(acts)[0])
        pred = torch.as_tensor(acts.predictions)
        features = features_of(acts)

        def chunk(rows: slice) -> torch.Tensor:
            f = as_tensor(features[rows])
            centred = f - self.train_mean_
            p_score = (centred * weight[pred[rows]]).sum(dim=1) / centred.norm(dim=1)
            return p_score + self.alpha * f.abs().sum(dim=1)

        return by_chunks(len(acts), chunk, features.shape[1], itemsize=8)
