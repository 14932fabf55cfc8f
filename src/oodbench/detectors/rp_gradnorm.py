"""RP-GradNorm: GradNorm with the uniform target replaced by the training class prior.

Jiang et al., "Detecting Out-of-distribution Data through In-distribution Class Prior",
ICML 2023 (checked against tmlr-group/class_prior ``funcs.py``, ``iterate_data_gradnorm_custom``).

For the last layer z = W f + b (W is C x D) and p = softmax(z), the gradient of
KL(pi || p) = sum_c pi_c log(pi_c / p_c) is

    d KL / d z_c  = p_c - pi_c,        d KL / d W_cj = (p_c - pi_c) f_j

so the mean absolute entry of that gradient is, in closed form,

    kappa(x) = ||f(x)||_1 * ||pi - p(x)||_1 / (D * C)

(the official code divides by 2048 * num_classes, D = 2048 for its ResNet-101); the test checks
it against ``torch.autograd`` on the actual ``nn.Linear``. With a uniform ``pi`` this is
:mod:`oodbench.detectors.gradnorm`'s score (T = 1) divided by D * C. Like the official code the
softmax is at T = 1 (its ``temperature_gradnorm`` argument is not used by this score).

Leaderboard row "RP+GradNorm" (ImageNet-1k vs SUN, FPR95 73.53): a ResNet-101 trained on
ImageNet-LT-a8 (long-tailed), not a standard ImageNet-1k model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._class_prior import ClassPriorFit
from oodbench.detectors._math import as_tensor, softmax
from oodbench.detectors._shaping import required, row_slices
from oodbench.detectors.base import Detector, register
from oodbench.detectors.rp_msp import PAPER
from oodbench.extract.activations import Activations


@register
@dataclass
class RPGradNorm(ClassPriorFit, Detector):
    """Mean |d KL(pi || softmax) / d W| of the head: ||f||_1 ||pi - p||_1 / (D C)."""

    name = "rp_gradnorm"
    requires = frozenset({"logits", "features", "train"})
    paper = PAPER

    def _score(self, acts: Activations) -> np.ndarray:
        features = required(acts, "features")
        prior = torch.from_numpy(self.prior_)
        scale = 1.0 / (features.shape[1] * acts.num_classes)
        out = np.empty(len(acts), dtype=np.float64)
        for sl in row_slices(len(acts), max(acts.num_classes, features.shape[1])):
            spread = (prior - softmax(acts.logits[sl])).abs().sum(dim=1)
            size = as_tensor(features[sl]).abs().sum(dim=1)
            out[sl] = (size * spread * scale).numpy()
        return out
