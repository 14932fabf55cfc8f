"""GradNorm: the L1 norm of the last layer's gradient of KL(uniform || softmax), in closed form.

Huang, Geng & Li, "On the Importance of Gradients for Detecting Distributional Shifts in the
Wild", NeurIPS 2021 (arXiv 2110.00218).

The paper scores x by ``|| d KL(u || softmax(z / T)) / d W ||_1`` for the weight W (C x D) of the
last linear layer, z = W f + b, u = (1/C, ..., 1/C). With p = softmax(z / T):

    KL(u || p)        = -(1/C) sum_c log p_c - log C
    d KL / d z_c      = (p_c - 1/C) / T
    d KL / d W_cj     = (p_c - 1/C) f_j / T                      (an outer product)
    kappa = ||d KL / d W||_1 = (1/T) * (sum_j |f_j|) * (sum_c |p_c - 1/C|)

so it is computed from the cached penultimate features and logits with no backward pass (the
test checks it against ``torch.autograd`` on the actual ``nn.Linear``). Higher = more ID, as in
the paper. Default ``temperature=1`` (the paper's choice).

The official code uses targets of all ones instead of 1/C (``sum_c -log p_c``), which
multiplies every score by the constant C and changes no ranking; pytorch-ood 0.4.0
``GradNorm`` (param_filter selecting the weight) averages over classes like the paper and
returns ``-kappa``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodbench.constraints import Positive
from oodbench.detectors._math import as_tensor, softmax
from oodbench.detectors._shaping import required, row_slices
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class GradNorm(Detector):
    """L1 norm of the head-weight gradient of KL(uniform || softmax): ||f||_1 * ||p - u||_1 / T."""

    temperature: Positive = 1.0

    name = "gradnorm"
    requires = frozenset({"logits", "features"})
    paper = "Huang, Geng & Li, NeurIPS 2021, arXiv 2110.00218"
    score_only_hyperparams = frozenset({"temperature"})

    def _score(self, acts: Activations) -> np.ndarray:
        features = required(acts, "features")
        out = np.empty(len(acts), dtype=np.float64)
        for sl in row_slices(len(acts), max(acts.num_classes, features.shape[1])):
            p = softmax(acts.logits[sl], self.temperature)
            spread = (p - 1.0 / acts.num_classes).abs().sum(dim=1)
            size = as_tensor(features[sl]).abs().sum(dim=1)
            out[sl] = (size * spread / self.temperature).numpy()
        return out
