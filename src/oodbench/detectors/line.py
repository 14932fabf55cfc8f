"""LINe: leveraging important neurons (Shapley-value masks + ReAct clipping); energy score.

Ahn, Park & Kim, "LINe: Out-of-Distribution Detection by Leveraging Important Neurons",
CVPR 2023 (arXiv 2303.13995).

Neuron importance is the class-wise Shapley value of each penultimate unit, approximated to
first order (Taylor) as in the paper and its official code (``_compute_taylor_scores``): for a
training sample of label y the contribution of unit j is ``a_j * d z_y / d a_j``, which for a
linear head is ``a_j W_yj``; averaged over the training samples of class c,

    S_cj = W_cj * mean_{x: y(x) = c} a_j(x)                   (C x D; exact for a linear head)

Masks, for every class c (p_a, p_w are percents):

    A_c  = [S_cj > p_a-th percentile of S_c.]                 (activation mask, D units)
    M_c  = [|S_cj| W_kj > p_w-th percentile of |S_c.| W]       (weight mask over all C x D weights)

Scoring a sample with penultimate features f:

    f'    = min(f, t),  t = clip_percentile-th percentile of all training activations (ReAct)
    c     = argmax_k (W f' + b)_k                             (predicted class, unmasked head)
    kappa = logsumexp((W * M_c) (f' * A_c) + b)               (negative energy, T = 1)

Defaults: ``weight_sparsity=10``, ``activation_sparsity=10`` (the official ImageNet script,
``--p-w 10 --p-a 10``) and ``clip_percentile=90`` (ReAct's percentile; the official ImageNet
script instead passes the absolute threshold 0.8 for its ResNet-50, which is model-specific).
The importances use the unclipped training features, as the official code does. A class with
no training sample gets the mean of all ID training features in place of its class mean.
pytorch-ood 0.4.0 has no LINe; the tests compare with an independent per-sample loop that
mirrors the official ``RouteLUNCH`` layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oodbench.compute import current, to_host
from oodbench.constraints import Percentile
from oodbench.detectors._math import as_tensor, neg_energy
from oodbench.detectors._shaping import (
    check_feature_dim,
    head_tensors,
    percentile,
    required,
    row_percentiles,
    row_slices,
    sampled_percentile,
)
from oodbench.detectors.base import Detector, register
from oodbench.errors import ClassCountMismatchError
from oodbench.extract.activations import Activations


def class_means(features: np.ndarray, labels: np.ndarray, num_classes: int) -> torch.Tensor:
    """Mean feature of each class (C, D) in float64; the all-ID mean for classes without rows."""
    labels = np.asarray(labels)
    if labels.max(initial=-1) >= num_classes:
        raise ClassCountMismatchError(
            f"LINe: training labels go up to {labels.max()} but the head has {num_classes} "
            "classes; fit on activations of the model's own training classes"
        )
    sums = torch.zeros(num_classes, features.shape[1], dtype=torch.float64)
    for sl in row_slices(len(features), features.shape[1]):
        known = labels[sl] >= 0
        sums.index_add_(0, torch.as_tensor(labels[sl][known]), as_tensor(features[sl][known]))
    counts = torch.as_tensor(np.bincount(labels[labels >= 0], minlength=num_classes))
    overall = sums.sum(dim=0) / max(int(counts.sum()), 1)
    return torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], overall)


#: products of a sample of head rows that bracket each class's weight cut (NumPy path)
_CUT_SAMPLE = 2**17


def weight_cuts(importance: torch.Tensor, weight: torch.Tensor, q: float) -> torch.Tensor:
    """``M_c``'s thresholds: ``np.percentile(|S_c.| * W, q)`` over all C x D products, per class
    c, in float64: (C,).

    On the NumPy path each class's two order statistics come from one pass over its products in
    row blocks of about 1 MiB, bracketed by the products of evenly spaced head rows
    (``_shaping.sampled_percentile``: exact, NumPy's value to the last bit), instead of a
    selection over all C x D products (about 4 times the work, each of them materialised:
    35 s on one core for a 1,000 x 2,048 head). On the torch path, per block of classes, one
    ``kthvalue`` over the products (``row_percentiles``). On the CPU the classes run on the
    single-threaded workers (``Backend.run_chunks``); each class's cut is written into one
    preallocated tensor (a list of small per-block results, each made after that block's
    temporaries, fragmented glibc's heap: 16.7 GB peak on a 1,000 x 2,048 head).
    """
    backend = current()
    num_classes, dim = weight.shape
    cuts = torch.empty(num_classes, dtype=torch.float64, device=backend.device)
    if backend.kind == "numpy":
        w, imp = weight.numpy(), importance.numpy()
        sampled = w[np.unique(np.linspace(0, num_classes - 1,
                                          max(1, _CUT_SAMPLE // dim)).astype(np.int64))]
        step = max(1, 2**20 // (8 * dim))
        blocks = [slice(s, s + step) for s in range(0, num_classes, step)]

        def cut(c: int) -> float:
            scale = imp[c]

            def exact(ranks: tuple[int, int]) -> tuple[float, float]:
                picked = np.partition((w * scale).ravel(), list(ranks))
                return float(picked[ranks[0]]), float(picked[ranks[1]])

            return sampled_percentile(num_classes * dim, q, (sampled * scale).ravel(),
                                      lambda: (w[b] * scale for b in blocks), exact)

        def some(classes: slice) -> None:
            cuts[classes] = torch.tensor([cut(c) for c in range(num_classes)[classes]],
                                         dtype=torch.float64)
    else:
        w64 = backend.tensor(weight, torch.float64)
        imp64 = backend.tensor(importance, torch.float64)

        def some(classes: slice) -> None:
            products = imp64[classes, None, :] * w64
            cuts[classes] = row_percentiles(products.reshape(-1, num_classes * dim), q)

    block = max(1, backend.chunk_bytes // (8 * num_classes * dim))
    backend.run_chunks((slice(s, s + block) for s in range(0, num_classes, block)), some)
    return cuts.cpu()


@register
@dataclass
class LINe(Detector):
    """Energy through class-specific Shapley masks on clipped features and head weights."""

    clip_percentile: Percentile = 90.0
    weight_sparsity: Percentile = 10.0
    activation_sparsity: Percentile = 10.0

    name = "line"
    requires = frozenset({"features", "head", "train"})
    paper = "Ahn, Park & Kim, CVPR 2023, arXiv 2303.13995"

    def _fit(self, train: Activations | None, model: Any) -> None:
        assert train is not None
        features = required(train, "features")
        self.weight_, self.bias_ = head_tensors(train)
        check_feature_dim(features, self.weight_, self.name)
        num_classes, dim = self.weight_.shape
        shapley = self.weight_ * class_means(features, train.labels, num_classes)
        cut = np.percentile(shapley.numpy(), self.activation_sparsity, axis=1)
        self.activation_mask_ = shapley > as_tensor(cut)[:, None]
        self.importance_ = shapley.abs()
        self.weight_cut_ = weight_cuts(self.importance_, self.weight_, self.weight_sparsity)
        self.clip_ = percentile(features, self.clip_percentile)

    def _score(self, acts: Activations) -> np.ndarray:
        """On the backend's device: the predicted class and the masks in float64 (they decide
        discrete choices), the masked head's energies in the features' precision."""
        features = required(acts, "features")
        check_feature_dim(features, self.weight_, self.name)
        backend = current()
        dtype = torch.float64 if features.dtype == np.float64 else torch.float32
        weight64, bias64 = backend.tensor(self.weight_, torch.float64), backend.tensor(self.bias_, torch.float64)
        weight, bias = weight64.to(dtype), bias64.to(dtype)
        importance = backend.tensor(self.importance_, torch.float64)
        weight_cut = backend.tensor(self.weight_cut_, torch.float64)
        activation_mask = self.activation_mask_.to(backend.device)
        predicted = np.empty(len(features), dtype=np.int64)

        def predict(sl: slice) -> None:
            clipped = backend.tensor(features[sl], torch.float64).clamp(max=self.clip_)
            predicted[sl] = torch.addmm(bias64, clipped, weight64.T).argmax(dim=1).cpu().numpy()

        backend.run_chunks(backend.rows(len(features), max(weight.shape), 8), predict)
        out = np.empty(len(features), dtype=np.float64)
        classes = np.unique(predicted)

        def score(some: slice) -> None:  # a few predicted classes: their masks, their rows
            for c in classes[some]:
                masked_weight = weight * (importance[c][None, :] * weight64 > weight_cut[c])
                rows = np.flatnonzero(predicted == c)
                for sl in backend.rows(len(rows), max(weight.shape)):
                    f = backend.tensor(features[rows[sl]], dtype).clamp(max=self.clip_)
                    f = f * activation_mask[c]
                    out[rows[sl]] = to_host(neg_energy(torch.addmm(bias, f, masked_weight.T)))

        # the classes are independent (disjoint rows of ``out``): on the CPU they run on the
        # single-threaded workers, each class's C x D mask in one worker
        step = max(1, len(classes) // 64)
        backend.run_chunks((slice(s, s + step) for s in range(0, len(classes), step)), score)
        return out
