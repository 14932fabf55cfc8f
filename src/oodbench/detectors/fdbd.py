"""fDBD: feature distance to the decision boundaries, normalised by the distance to the mean.

Liu & Qin, "Fast Decision Boundary based Out-of-Distribution Detector", ICML 2024
(arXiv 2312.11536, https://github.com/litianliu/fDBD-OOD).

With the linear head ``z_c = w_c^T f + b_c``, predicted class ``y = argmax_c z_c`` and ``mu`` the
mean training feature (fit; labels not used), the distance of ``f`` to the boundary between ``y``
and ``c`` is ``|z_y - z_c| / ||w_y - w_c||``. Score:

    kappa(x) = 1/(C-1) sum_{c != y} |z_y - z_c| / ||w_y - w_c||_2  /  ||f(x) - mu||_2

``distance_to_mean=False`` divides by ``||f(x)||`` instead of ``||f(x) - mu||`` (OpenOOD's
``distance_as_normalizer=False``, which its hyper-parameter search may choose). The logits must
be the head's output on ``f`` (as extracted). Float64, chunked. OpenOOD's ``fDBDPostprocessor``
sums instead of averaging (a constant factor C-1, the same ranking); we follow the paper.

pytorch-ood 0.4.0 ``fDBD(encoder, head)`` (``fit_features`` then ``predict_features``) returns
``-kappa`` (float32, ``||f - mu||`` clamped at 1e-8).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.constraints import Bool
from oodbench.detectors._math import as_tensor
from oodbench.detectors._stats import TrainMeanFit, by_chunks, features_of, head_of
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class FDBD(TrainMeanFit, Detector):
    """Mean distance to the decision boundaries over the distance to the training mean."""

    name = "fdbd"
    requires = frozenset({"features", "logits", "head", "train"})
    paper = "Liu & Qin, ICML 2024, arXiv 2312.11536"
    score_only_hyperparams = frozenset({"distance_to_mean"})

    distance_to_mean: Bool = True

    def _score(self, acts: Activations) -> np.ndarray:
        weight = as_tensor(head_of(acts)[0])
        pair_norms = torch.cdist(weight, weight)  # ||w_p - w_c||, (C, C)
        pair_norms.fill_diagonal_(1.0)  # the c = y term is |z_y - z_y| / 1 = 0
        features = features_of(acts)
        centre = self.train_mean_ if self.distance_to_mean else torch.zeros_like(self.train_mean_)

        def chunk(rows: slice) -> torch.Tensor:
            z = as_tensor(acts.logits[rows])
            top, pred = z.max(dim=1)
            boundary = ((top[:, None] - z) / pair_norms[pred]).sum(dim=1) / (z.shape[1] - 1)
            return boundary / (as_tensor(features[rows]) - centre).norm(dim=1)

        return by_chunks(len(acts), chunk, 2 * acts.num_classes + features.shape[1], itemsize=8)
