"""Entropy: the negative Shannon entropy of the softmax.

The C-OOD paper's "entropy" confidence (Galil, Dabbah & El-Yaniv, ICLR 2023, arXiv 2302.11893);
as an OOD score it goes back to Hendrycks & Gimpel (ICLR 2017, arXiv 1610.02136) and is the
score pytorch-ood cites from Chan, Rottmann & Gottschalk (ICCV 2021, arXiv 2012.06575).

    kappa(x) = -H(p) = sum_c p_c log p_c,    p = softmax(z(x))

computed as ``sum_c e_c d_c / (1 + s) - log1p(s)`` with ``d_c = z_c - max z``,
``e_c = exp(d_c)`` and ``s`` the sum of ``e_c`` over the classes but the top one (float32 exps
and sums, float64 result: about 1e-7 relative to an all-float64 computation; confident
predictions keep their tiny entropies, terms with p_c = 0 contribute 0). No hyper-parameters. pytorch-ood 0.4.0 ``Entropy.score`` returns ``H`` computed with p clipped to
``[1e-7, 1]`` inside the log, so it equals ``-kappa`` whenever every probability is >= 1e-7 and
slightly overstates the entropy of very confident predictions otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oodbench.detectors._math import row_max, working
from oodbench.detectors._stats import by_chunks
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations


@register
@dataclass
class Entropy(Detector):
    """Negative entropy of the softmax distribution."""

    name = "entropy"
    requires = frozenset({"logits"})
    paper = "Hendrycks & Gimpel, ICLR 2017, arXiv 1610.02136 (C-OOD 'entropy', arXiv 2302.11893)"

    def _score(self, acts: Activations) -> np.ndarray:
        def chunk(rows: slice) -> torch.Tensor:
            z = working(acts.logits[rows])
            top, where = row_max(z)
            d = z - top
            e = torch.exp(d).scatter_(1, where, 0.0)  # the top term (d = 0) adds nothing to sum e d
            others = e.sum(dim=1).double()
            return torch.linalg.vecdot(e, d).double() / (1.0 + others) - torch.log1p(others)

        return by_chunks(len(acts), chunk, acts.num_classes)
