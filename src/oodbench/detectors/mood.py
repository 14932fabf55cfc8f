"""MOOD: distance to one Gaussian of the L2-normalised features of a masked-image-modelling model.

Li, Chen, He, Yu, Liu & Jia, "Rethinking Out-of-distribution (OOD) Detection: Masked Image
Modeling is All You Need", CVPR 2023 (arXiv 2302.02615; authors as in the paper and the
official README's citation; checked against dvlab-research/MOOD
``MOODv1/eval_with_features.py`` and ``MOODv1/ood_utils.py``).

Features: the model's penultimate features, for MOOD's BEiT the mean of the patch tokens (the
class token left out) through ``fc_norm``, which is what the timm adapter's ``features`` of a
``timm:beit_*`` model are (``forward_head(pre_logits=True)``). Each is L2-normalised,
``g = f / (||f||_2 + 1e-10)``. Fit on the ID training features:

    mu = mean_i g_i,   Sigma = 1/N sum_i (g_i - mu)(g_i - mu)^T          (``np.cov(bias=True)``)
    kappa(x) = -(g(x) - mu)^T Sigma^+ (g(x) - mu)

one *class-agnostic* Gaussian (the code's default; not Lee et al.'s class-conditional
Mahalanobis with a tied covariance). ``conditioning`` selects the code's other options, a
Gaussian per class with its own covariance: ``"class_min"`` (``--cc``: the smallest of the
class distances) and ``"class_mean"`` (``--avgcc``: their mean). The code's pseudo-inverse is
``np.linalg.pinv`` (relative cut-off 1e-15); this one keeps eigenvalues above ``D * eps`` of the
largest (:func:`oodbench.detectors._stats.whitener`), which differ only on (near-)singular
covariances.

The leaderboard row (ImageNet-1k vs SUN, AUROC 89.8) is BEiT-L/16 pretrained by masked image
modelling on ImageNet-22k and fine-tuned on ImageNet-1k, MOOD's own checkpoint: load it with
``oodbench.models.load("timm:beit_large_patch16_224", num_classes=1000, weights=PATH)``.
timm's ``beit_large_patch16_224.in22k_ft_in22k_in1k`` is another checkpoint (fine-tuned on
22k, then 1k), so its numbers are not the row's.

Preprocessing as published (:mod:`oodbench.models.preprocessing`): the official code evaluates
at ``Resize(256) + CenterCrop(224)`` (crop 0.875) where timm's config gives 0.9 --
``model.transform = mood_eval_transform(model)`` -- and fits the Gaussian on training features
extracted with the fine-tuning's *training* augmentation (RandAugment, colour jitter, random
erasing): ``with using_transform(model, mood_train_transform(model)): fit =
oodbench.extract(model, train_source)``; in an experiment file, ``[id] fit_transform =
"mood_train"`` (:mod:`oodbench.models.fit_transforms`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from oodbench.compute import to_host
from oodbench.constraints import Options
from oodbench.detectors._stats import (
    chunks,
    feature_mean,
    features_of,
    labelled_rows,
    min_sq_mahalanobis,
    scatter_matrix,
    take_rows,
    whitener,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations

#: one class-agnostic Gaussian (the paper), or one per class: min / mean of the distances
CONDITIONING = ("agnostic", "class_min", "class_mean")
#: added to every norm before dividing, as the official code
NORM_EPS = 1e-10


def l2_normalised(features: np.ndarray) -> np.ndarray:
    """``f / (||f||_2 + 1e-10)`` row by row, float32 (float64 inputs stay float64)."""
    dtype = np.float64 if features.dtype == np.float64 else np.float32
    out = np.empty(features.shape, dtype=dtype)
    for rows in chunks(len(features)):
        f = np.asarray(features[rows], dtype=np.float64)
        out[rows] = f / (np.linalg.norm(f, axis=1, keepdims=True) + NORM_EPS)
    return out


def gaussian(features: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mu (1, D), M)`` of the maximum-likelihood Gaussian of ``features``, ``M M^T = Sigma^+``."""
    mean = feature_mean(features)
    return mean[None, :], whitener(scatter_matrix(features, mean) / len(features))


@register
@dataclass
class MOOD(Detector):
    """Negative Mahalanobis distance of the L2-normalised features to one Gaussian (or per class)."""

    conditioning: Annotated[str, Options(
        *CONDITIONING, note="one Gaussian of all features, or one per class")] = "agnostic"

    name = "mood"
    requires = frozenset({"features", "train"})
    paper = "Li et al., CVPR 2023, arXiv 2302.02615"

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        features = features_of(train)
        if self.conditioning == "agnostic":
            self.gaussians_ = [gaussian(l2_normalised(features))]
            return
        rows = labelled_rows(train, f"detector {self.name!r} (conditioning={self.conditioning!r})")
        labels = np.asarray(train.labels)[rows]
        normalised = l2_normalised(take_rows(features, rows))
        self.gaussians_ = [gaussian(normalised[labels == c]) for c in np.unique(labels)]

    def _score(self, acts: Activations) -> np.ndarray:
        g = l2_normalised(features_of(acts))
        distances = torch.stack([min_sq_mahalanobis(g, mu, m) for mu, m in self.gaussians_])
        combined = distances.mean(dim=0) if self.conditioning == "class_mean" else distances.min(dim=0).values
        return -to_host(combined)
