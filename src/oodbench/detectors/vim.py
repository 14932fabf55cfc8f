"""ViM: virtual-logit matching.

Wang, Li, Feng & Zhang, "ViM: Out-Of-Distribution with Virtual-logit Matching", CVPR 2022
(arXiv 2203.10807, https://github.com/haoqiwang/vim).

Fit (labels not used), with ``W``, ``b`` the linear head and ``f`` the fit features:

    u     = -pinv(W) b                               (origin where all logits are 0)
    S     = 1/N sum_i (f_i - u)(f_i - u)^T           (uncentred about u)
    R     = eigenvectors of S beyond the ``dim`` largest eigenvalues (the residual space)
    alpha = mean_i max_c z_ic / mean_i ||(f_i - u)^T R||

Score (the log-odds form of the paper's virtual-logit softmax, the same ranking):

    kappa(x) = log sum_c exp(z_c(x)) - alpha ||(f(x) - u)^T R||

The paper's softmax probability of the virtual logit ``v = alpha ||x^{P perp}||`` is
``e^v / (e^v + sum_c e^{z_c})``, a decreasing function of kappa. ``dim`` (the principal-space
dimension D) defaults to the official ``benchmark.py`` rule, 1000 if the feature dimension is
>= 2048 else 512 (the paper: D=1000 for 2048-d features, 512 for 768-d ViT features), and to
half the feature dimension when it is 512 or less (where 512 is impossible; our extension).
OpenOOD v1.5 uses D=256 and searches {256, 1000} (``preset="openood"``). The origin ``u`` is the
minimum-norm least-squares solution of ``W u = -b`` (``origin``; equal to ``-pinv(W) b``), the
scatter matrix and its eigendecomposition are float64 (``_stats.symmetric_eigh``: a float32 one
moved the residual norms by 2.5e-4 relative; float32 products in the scatter matrix, 1e-5), the
projections ``(f - u)^T R`` run in the features' precision on the backend's device
(``oodbench.compute``; ~1e-7 relative).

The residual space must be non-trivial on the fit data: with fewer fit rows than ``dim`` the
principal space already holds every fit feature, the residual norms vanish and alpha would be
infinite; ``fit`` raises :class:`~oodbench.errors.UndeterminedStatisticError` then.

pytorch-ood 0.4.0 ``ViM(encoder, d, w, b)`` returns ``alpha ||x^{P perp}|| - logsumexp(z) =
-kappa``, all in float32: ``u = -pinv(W) b`` in its constructor, ``cov = X^T X / N`` and
``torch.linalg.eigh(cov)`` in ``fit_features``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from oodbench.compute import current
from oodbench.constraints import Integer
from oodbench.detectors._math import as_tensor, neg_energy
from oodbench.detectors._stats import (
    by_chunks,
    chunks,
    features_of,
    head_of,
    scatter_matrix,
    symmetric_eigh,
)
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError, UndeterminedStatisticError
from oodbench.extract.activations import Activations


def default_principal_dim(feature_dim: int) -> int:
    """The official ViM code's principal-space dimension (1000 if >= 2048 else 512), half the
    feature dimension where 512 would leave no residual space."""
    if feature_dim >= 2048:
        return 1000
    if feature_dim > 512:
        return 512
    return feature_dim // 2


def origin(weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``u = -pinv(W) b`` (float64): the minimum-norm least-squares solution of ``W u = -b``.

    With fewer classes than features and ``W`` of full row rank (a trained head), ``u = -W^T
    (W W^T)^{-1} b`` by a Cholesky factorisation of the C x C matrix ``W W^T`` (about 5x faster
    than a pivoted QR of ``W``); the solution is accepted only when ``W u = -b`` holds to 1e-9
    relative. Otherwise (more classes than features, a rank-deficient or ill-conditioned ``W``)
    LAPACK's ``gelsy`` (column-pivoted QR).
    """
    if weight.shape[0] <= weight.shape[1]:
        factor, info = torch.linalg.cholesky_ex(weight @ weight.T)
        if info == 0:
            u = -weight.T @ torch.cholesky_solve(bias[:, None], factor)[:, 0]
            if torch.linalg.vector_norm(weight @ u + bias) <= 1e-9 * torch.linalg.vector_norm(bias):
                return u
    return -torch.linalg.lstsq(weight, bias[:, None], driver="gelsy").solution[:, 0]


@register
@dataclass
class ViM(Detector):
    """Energy minus the scaled norm of the feature residual outside the principal space."""

    name = "vim"
    requires = frozenset({"features", "logits", "head", "train"})
    paper = "Wang et al., CVPR 2022, arXiv 2203.10807"

    dim: Annotated[int | None, Integer(
        min=1,
        note="the principal-space dimension, below the feature dimension; None: the paper's rule")] = None

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        feature_dim = features_of(train).shape[1]
        dim = default_principal_dim(feature_dim) if self.dim is None else int(self.dim)
        if not 0 < dim < feature_dim:
            raise InvalidInputError(
                f"detector {self.name!r}: dim (principal-space dimension) must be in "
                f"[1, {feature_dim - 1}] for {feature_dim}-d features; got {dim}"
            )
        self.origin_ = origin(*(as_tensor(a) for a in head_of(train)))
        eigvals, eigvecs = symmetric_eigh(scatter_matrix(features_of(train), self.origin_) / len(train))
        order = torch.argsort(eigvals, descending=True)
        self.residual_space_ = eigvecs[:, order[dim:]].contiguous()
        self.principal_dim_ = dim
        max_logit = sum(
            float(np.max(train.logits[rows], axis=1).sum(dtype=np.float64)) for rows in chunks(len(train))
        ) / len(train)
        residual = float(self._residual_norm(features_of(train)).mean())
        total = float(self._residual_norm(features_of(train), full=True).mean())
        if not residual > 1e-9 * total:
            raise UndeterminedStatisticError(
                f"detector {self.name!r}: the {dim}-d principal space spans the fit features "
                f"({len(train)} rows), so their residual norms vanish and alpha "
                f"(mean max-logit / mean residual norm) is undetermined; fit on more rows than "
                f"dim or lower dim below {len(train)}"
            )
        self.alpha_ = float(max_logit / residual)

    def _residual_norm(self, features: np.ndarray, full: bool = False) -> np.ndarray:
        """``||(f - u)^T R||`` per row (``||f - u||`` with ``full``), on the backend's device in
        the features' precision."""
        backend = current()
        dtype = torch.float64 if features.dtype == np.float64 else torch.float32
        origin = backend.tensor(self.origin_, dtype)
        space = backend.tensor(self.residual_space_, dtype)

        def norms(rows: slice) -> torch.Tensor:
            centred = backend.tensor(features[rows], dtype) - origin
            return (centred if full else centred @ space).norm(dim=1)

        return by_chunks(len(features), norms, features.shape[1])

    def _score(self, acts: Activations) -> np.ndarray:
        energy = by_chunks(len(acts), lambda rows: neg_energy(acts.logits[rows]), acts.num_classes)
        return energy - self.alpha_ * self._residual_norm(features_of(acts))
