"""SHE: simplified Hopfield energy with stored class patterns.

Zhang et al., "Out-of-Distribution Detection based on In-Distribution Data
Patterns Memorization with Modern Hopfield Energy", ICLR 2023 (OpenReview KkazG4lgKL).

Fit on the labelled fit rows: the pattern ``S_c`` of class c is the mean feature of the fit
samples of class c that the model classifies correctly. Score, with ``y_hat`` the predicted class:

    kappa(x) = f(x)^T S_{y_hat(x)}

A class without a correctly classified fit sample has no pattern; its pattern is set to zero
(score 0, the lowest possible score for non-negative post-ReLU features) and the class is listed
in ``missing_classes_`` (pytorch-ood raises; OpenOOD produces NaN). No hyper-parameters
(OpenOOD's default inner-product metric). Float64, chunked.

pytorch-ood 0.4.0 ``SHE(encoder, head)`` (``fit_features`` then ``predict_features``) returns
``-kappa``; it predicts with ``head(f)``, which equals the stored logits' argmax.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import as_tensor
from oodbench.detectors._stats import (
    by_chunks,
    class_means,
    features_of,
    labelled_rows,
    take_rows,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class SHE(Detector):
    """Inner product of the features with the predicted class's stored mean pattern."""

    name = "she"
    requires = frozenset({"features", "logits", "train"})
    paper = "Zhang et al., ICLR 2023 (OpenReview KkazG4lgKL)"

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        rows = labelled_rows(train, f"detector {self.name!r}")
        correct = rows[train.correct[rows]]
        labels = np.asarray(train.labels)[correct]
        self.patterns_, counts = class_means(take_rows(features_of(train), correct), labels, train.num_classes)
        self.missing_classes_ = np.flatnonzero(counts.numpy() == 0)
        if self.missing_classes_.size:
            warnings.warn(
                f"detector {self.name!r}: {self.missing_classes_.size} of {train.num_classes} "
                "classes have no correctly classified fit sample; their pattern is zero",
                stacklevel=3,
            )

    def _score(self, acts: Activations) -> np.ndarray:
        features, pred = features_of(acts), torch.as_tensor(acts.predictions)
        return by_chunks(
            len(acts), lambda rows: (as_tensor(features[rows]) * self.patterns_[pred[rows]]).sum(dim=1)
        )
