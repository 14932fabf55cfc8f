"""Mahalanobis: distance to the closest class mean under a tied Gaussian covariance.

Lee, Lee, Lee & Shin, "A Simple Unified Framework for Detecting Out-of-Distribution Samples and
Adversarial Attacks", NeurIPS 2018 (arXiv 1807.03888). Here on the penultimate features only,
without the paper's input pre-processing and multi-layer ensemble (OpenOOD's "MDS").

Fit on the labelled ID training rows (label >= 0):

    mu_c  = mean of the features of class c
    Sigma = 1/N sum_c sum_{i: y_i = c} (f_i - mu_c)(f_i - mu_c)^T     (tied covariance)

Score (squared distance, no factor 1/2):

    kappa(x) = -min_c (f(x) - mu_c)^T Sigma^+ (f(x) - mu_c)

``Sigma^+`` is the pseudo-inverse (scipy ``pinvh`` cut-off, as sklearn
``EmpiricalCovariance.precision_`` used by the paper's and OpenOOD's code), so fewer samples
than feature dimensions still work; the minimum runs over the classes present in the fit set.
Normalisation: the paper and sklearn divide by N (maximum likelihood); the unbiased pooled
estimate divides by N - C. Either is a constant factor of every distance and leaves the ranking
unchanged; we divide by N. Everything in float64, chunked.

pytorch-ood 0.4.0 ``Mahalanobis.fit_features`` keeps the *un-normalised* scatter matrix
``N Sigma`` plus a 1e-6 ridge and ``predict_features`` returns half the squared distance under
its inverse, so ``kappa = -2 N * predict_features(f)`` up to the ridge (relative ~1e-6 / (N lambda_min)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.compute import to_host
from oodbench.detectors._stats import (
    class_means,
    features_of,
    labelled_rows,
    min_sq_mahalanobis,
    scatter_matrix,
    take_rows,
    whitener,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class Mahalanobis(Detector):
    """Negative squared Mahalanobis distance to the closest class mean (tied covariance)."""

    name = "mahalanobis"
    requires = frozenset({"features", "train"})
    paper = "Lee et al., NeurIPS 2018, arXiv 1807.03888"

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        rows = labelled_rows(train, f"detector {self.name!r}")
        features = take_rows(features_of(train), rows)
        self._fit_labelled(features, np.asarray(train.labels)[rows], train.num_classes)

    def _fit_labelled(self, features: np.ndarray, labels: np.ndarray, num_classes: int) -> None:
        """The class Gaussians of the labelled fit rows (RMD extends this)."""
        means, counts = class_means(features, labels, num_classes)
        covariance = scatter_matrix(features, means, labels) / len(features)
        self.classes_ = np.flatnonzero(to_host(counts) > 0)
        self.means_ = means[self.classes_]
        self.covariance_ = covariance
        self.whitener_ = whitener(covariance)

    def _class_distance(self, acts: Activations) -> torch.Tensor:
        return min_sq_mahalanobis(features_of(acts), self.means_, self.whitener_)

    def _score(self, acts: Activations) -> np.ndarray:
        return -to_host(self._class_distance(acts))
