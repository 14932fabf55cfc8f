"""RankFeat: remove the rank-1 component of the last feature map, scored with the energy.

Song, Sebe & Wang, "RankFeat: Rank-1 Feature Removal for Out-of-distribution Detection",
NeurIPS 2022 (arXiv 2209.08590).

Per sample, the last block's feature map is reshaped to X in R^{C x HW}; with its largest
singular value s1 and singular vectors u1, v1:

    X'    = X - s1 u1 v1^T
    kappa = logsumexp(head(pool(X')))           (negative energy, T = 1)

``pool`` and ``head`` are the live model's own (``Classifier.pool`` / ``Classifier.head``) when
a model is passed to ``fit``; otherwise global average pooling and the cached linear head
``W, b`` (exact for the usual CNN: average pool then linear layer). Nothing else is fitted.

The paper's best ImageNet numbers fuse Block 3 and Block 4 (averaging the two logit vectors);
only the last block's map is cached, so this is the paper's "Block 4" RankFeat. The rank-1
term is exact (from the top eigenvector of the smaller Gram matrix, see ``remove_rank1``), not
the paper's approximate power iteration. ViT token maps (N, T, D) are rejected.

Relation to pytorch-ood 0.4.0 ``RankFeat``: identical (``torch.linalg.svd`` rank-1 removal on
(B, C, H, W)) with ``head = fc(avgpool(.))``; its score is ``-kappa``. OpenOOD's
``RankFeatPostprocessor`` is the Block 3 + 4 fusion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oodbench.detectors._math import as_tensor, neg_energy
from oodbench.detectors._shaping import head_tensors, required, row_slices
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations


def rank1_factors(fmap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(l, r)``, (B, C, 1) and (B, HW, 1), with ``l r^T = s1 u1 v1^T``, the rank-1 SVD term of
    each (C, H*W) matrix X of a (B, C, H, W) batch.

    Computed from the top eigenvector of the smaller Gram matrix: with v1 the top eigenvector of
    X^T X, ``s1 u1 v1^T = (X v1) v1^T``; with u1 that of X X^T, ``u1 (X^T u1)^T``. This is the
    same matrix as the SVD's, at a fraction of the cost of a batched SVD of (C x HW) matrices.
    """
    b, c, h, w = fmap.shape
    x = fmap.reshape(b, c, h * w)
    if h * w <= c:
        v = torch.linalg.eigh(x.transpose(1, 2) @ x).eigenvectors[:, :, -1:]  # (B, HW, 1)
        return x @ v, v
    u = torch.linalg.eigh(x @ x.transpose(1, 2)).eigenvectors[:, :, -1:]  # (B, C, 1)
    return u, x.transpose(1, 2) @ u


def remove_rank1(fmap: torch.Tensor) -> torch.Tensor:
    """``X - s1 u1 v1^T`` for each (C, H*W) matrix X of a (B, C, H, W) batch."""
    left, right = rank1_factors(fmap)
    return fmap - (left @ right.transpose(1, 2)).reshape(fmap.shape)


def pooled_without_rank1(fmap: torch.Tensor) -> torch.Tensor:
    """The global average pool of ``remove_rank1(fmap)``, (B, C), without forming it:
    ``mean_j (X - l r^T)_{:, j} = mean_j X_{:, j} - l mean_j r_j``."""
    left, right = rank1_factors(fmap)
    return fmap.mean(dim=(2, 3)) - left[:, :, 0] * right.mean(dim=1)


@register
@dataclass
class RankFeat(Detector):
    """Energy of the head after subtracting each feature map's rank-1 SVD component."""

    name = "rankfeat"
    requires = frozenset({"feature_map"})
    paper = "Song, Sebe & Wang, NeurIPS 2022, arXiv 2209.08590"

    def _fit(self, train: Activations | None, model: Any) -> None:
        self.model_ = model

    def _logits(self, fmap: torch.Tensor, acts: Activations) -> torch.Tensor:
        """Logits of the rank-1-removed maps: the live model's pool and head, else the cached
        linear head on their global average pool."""
        model = getattr(self, "model_", None)
        if model is None:
            weight, bias = head_tensors(acts)
            return pooled_without_rank1(fmap) @ weight.T + bias
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        dtype = param.dtype if param is not None else torch.float32
        with torch.no_grad():
            return model.head(model.pool(remove_rank1(fmap).to(device=device, dtype=dtype))).cpu()

    def _score(self, acts: Activations) -> np.ndarray:
        fmap = required(acts, "feature_map")
        if fmap.ndim != 4:
            raise InvalidInputError(
                f"RankFeat needs a CNN feature map (N, C, H, W); got shape {fmap.shape} "
                "(token maps of vision transformers are not supported)"
            )
        out = np.empty(len(fmap), dtype=np.float64)
        for sl in row_slices(len(fmap), int(np.prod(fmap.shape[1:]))):
            logits = self._logits(as_tensor(fmap[sl]), acts)
            out[sl] = neg_energy(logits.numpy()).numpy()
        return out
