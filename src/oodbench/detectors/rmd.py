"""Relative Mahalanobis distance (RMD).

Ren, Fort, Liu, Roy, Padhy & Lakshminarayanan, "A Simple Fix to Mahalanobis Distance for
Improving Near-OOD Detection", ICML 2021 UDL workshop (arXiv 2106.09022).

Fit: the class means and tied covariance of :mod:`oodbench.detectors.mahalanobis`, plus a
background Gaussian of all labelled fit features, ``mu_0 = mean f_i`` and
``Sigma_0 = 1/N sum_i (f_i - mu_0)(f_i - mu_0)^T``. With ``MD_k`` the squared Mahalanobis
distance to class k and ``MD_0`` the one under the background Gaussian:

    kappa(x) = -min_k (MD_k(f(x)) - MD_0(f(x))) = MD_0(f(x)) - min_k MD_k(f(x))

Both covariances divide by N (pseudo-inverses as in ``mahalanobis``); float64, chunked.

pytorch-ood 0.4.0 ``RMD`` keeps both scatter matrices un-normalised (each ``N Sigma`` + 1e-6 I),
so its ``predict_features`` is ``min_k (MD_k - MD_0) / N`` and ``kappa = -N * predict_features(f)``
up to the ridge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.compute import to_host
from oodbench.detectors._stats import (
    feature_mean,
    features_of,
    min_sq_mahalanobis,
    scatter_matrix,
    whitener,
)
from oodbench.detectors.base import register
from oodbench.detectors.mahalanobis import Mahalanobis
from oodbench.extract.activations import Activations


@register
@dataclass
class RelativeMahalanobis(Mahalanobis):
    """Class Mahalanobis distance minus the background-Gaussian distance, negated."""

    name = "rmd"
    paper = "Ren et al., 2021, arXiv 2106.09022"

    def _fit_labelled(self, features: np.ndarray, labels: np.ndarray, num_classes: int) -> None:
        super()._fit_labelled(features, labels, num_classes)
        mean = feature_mean(features)
        self.background_mean_ = mean[None, :]
        self.background_whitener_ = whitener(scatter_matrix(features, mean) / len(features))

    def _score(self, acts: Activations) -> np.ndarray:
        background = min_sq_mahalanobis(features_of(acts), self.background_mean_, self.background_whitener_)
        return to_host(background - self._class_distance(acts))
