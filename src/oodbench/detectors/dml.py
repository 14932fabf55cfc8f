"""DML: Decoupled MaxLogit, and its two parts MaxCosine and MaxNorm.

Zhang & Xiang, "Decoupling MaxLogit for Out-of-Distribution Detection", CVPR 2023,
pp. 3388-3397 (CVF open access; no arXiv version that we know of). A bias-free logit factorises as
``z_c = ||w_c|| ||f|| cos(f, w_c)``; the paper scores the two factors separately:

    MaxCosine(x) = max_c cos(f(x), w_c)          (name "maxcosine")
    MaxNorm(x)   = ||f(x)||_2                    (name "maxnorm")
    DML(x)       = MaxCosine(x) + lambda * MaxNorm(x)   (name "dml")

with ``f`` the penultimate features and ``w_c`` the rows of the linear head (its bias is not
used). The official README writes the DML score as ``MaxCosine + lambda * MaxNorm``; the paper
tunes lambda per dataset and we could not verify an ImageNet value, so the default
``lam=0.002`` (the value of public re-implementations, which keeps the norm a tie-breaker of the
cosine) is a starting point for ``oodbench.tune``. DML+ combines MaxCosine of a model trained
with focal loss and MaxNorm of a second model trained with center loss; it needs those two
trained models and is not implemented here (score two models' activations with "maxcosine" and
"maxnorm" and add them to reproduce it). pytorch-ood 0.4.0 has no DML.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.constraints import FiniteFloat
from oodbench.detectors._math import as_tensor, cosine_similarities
from oodbench.detectors._stats import (
    by_chunks,
    features_of,
    head_of,
)
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


def max_cosine(acts: Activations) -> np.ndarray:
    """max_c cos(f, w_c) per row, float64, chunked."""
    features, weight = features_of(acts), head_of(acts)[0]
    return by_chunks(len(acts), lambda rows: cosine_similarities(features[rows], weight).max(dim=1).values,
                     features.shape[1] + len(weight), itemsize=8)


def max_norm(acts: Activations) -> np.ndarray:
    """||f||_2 per row, float64, chunked."""
    features = features_of(acts)
    return by_chunks(len(acts), lambda rows: as_tensor(features[rows]).norm(dim=1), features.shape[1],
                     itemsize=8)


@register
@dataclass
class MaxCosine(Detector):
    """Largest cosine similarity between the features and a head row (DML's MaxCosine)."""

    name = "maxcosine"
    requires = frozenset({"features", "head"})
    paper = "Zhang & Xiang, CVPR 2023"

    def _score(self, acts: Activations) -> np.ndarray:
        return max_cosine(acts)


@register
@dataclass
class MaxNorm(Detector):
    """L2 norm of the penultimate features (DML's MaxNorm)."""

    name = "maxnorm"
    requires = frozenset({"features"})
    paper = "Zhang & Xiang, CVPR 2023"

    def _score(self, acts: Activations) -> np.ndarray:
        return max_norm(acts)


@register
@dataclass
class DML(Detector):
    """Decoupled MaxLogit: MaxCosine + lam * MaxNorm."""

    name = "dml"
    requires = frozenset({"features", "head"})
    paper = "Zhang & Xiang, CVPR 2023"
    score_only_hyperparams = frozenset({"lam"})

    lam: FiniteFloat = 0.002

    def _score(self, acts: Activations) -> np.ndarray:
        return max_cosine(acts) + self.lam * max_norm(acts)
