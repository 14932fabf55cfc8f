"""MCM: maximum concept matching for CLIP zero-shot classifiers.

Ming et al., "Delving into Out-of-Distribution Detection with Vision-Language Representations",
NeurIPS 2022 (arXiv 2211.13445).

    s_c(x)   = cos(I(x), T(t_c))                   (cosine of image and class text embedding)
    kappa(x) = max_c exp(s_c / tau) / sum_k exp(s_k / tau),   tau = 1 (the paper's default)

The cosines come from the cached activations: ``features`` are the normalised image embeddings
and the head's rows are the class text embeddings times CLIP's logit scale, so
``s = normalise(features) @ normalise(head_weight).T`` — the logit scale cancels. Note tau = 1 is
applied to raw cosines (in [-1, 1]); it is *not* CLIP's softmax over ``100 * cos`` (that is MSP
on a CLIP classifier). Works for any model with a linear head (cosine classifier view).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.constraints import Positive
from oodbench.detectors._math import cosine_similarities
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class MCM(Detector):
    """Maximum softmax of image-text cosine similarities over a temperature (CLIP)."""

    name = "mcm"
    requires = frozenset({"features", "head"})
    paper = "Ming et al., NeurIPS 2022, arXiv 2211.13445"
    score_only_hyperparams = frozenset({"temperature"})

    temperature: Positive = 1.0

    def _score(self, acts: Activations) -> np.ndarray:
        cos = cosine_similarities(acts.features, acts.head_weight)  # type: ignore[arg-type]
        return torch.softmax(cos / self.temperature, dim=1).max(dim=1).values.numpy()
