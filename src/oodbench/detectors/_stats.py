"""Training statistics shared by the feature-based detectors.

Class means, scatter (covariance) matrices, Mahalanobis whitening, minimum Mahalanobis
distances, exact nearest-neighbour search with faiss and its bank rows, the train-mean fit,
row chunking and subsampling. Everything
streams over rows in chunks so that 50k x 2048 features against a 100k-sample bank fit in memory;
statistics accumulate in float64.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import faiss
import numpy as np
import torch

from oodbench.detectors._math import as_tensor, l2_normalize
from oodbench.errors import EmptyInputError, InvalidInputError
from oodbench.extract.activations import Activations

#: rows per chunk for streamed matrix products
CHUNK = 4096


def features_of(acts: Activations) -> np.ndarray:
    """``acts.features`` (present: ``Detector.fit``/``score`` validated ``requires``)."""
    assert acts.features is not None
    return acts.features


def head_of(acts: Activations) -> tuple[np.ndarray, np.ndarray]:
    """``(acts.head_weight, acts.head_bias)`` (present: validated through ``requires``)."""
    assert acts.head_weight is not None and acts.head_bias is not None
    return acts.head_weight, acts.head_bias


def chunks(n: int, size: int | None = None) -> Iterator[slice]:
    """Consecutive row slices of at most ``size`` (default ``CHUNK``) rows covering ``range(n)``."""
    size = size or CHUNK
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def by_chunks(n: int, fn: Callable[[slice], torch.Tensor | np.ndarray]) -> np.ndarray:
    """``fn(rows)`` evaluated chunk by chunk over ``range(n)`` and stacked into a float64 (N,) array."""
    out = np.empty(n, dtype=np.float64)
    for rows in chunks(n):
        value = fn(rows)
        out[rows] = value.numpy() if isinstance(value, torch.Tensor) else value
    return out


def subsample(n: int, fraction: float, seed: int, who: str) -> np.ndarray:
    """Sorted indices of a random ``fraction`` of ``n`` rows (all rows when ``fraction == 1``)."""
    if not 0.0 < fraction <= 1.0:
        raise InvalidInputError(f"{who}: fit_fraction must be in (0, 1]; got {fraction}")
    if fraction == 1.0:
        return np.arange(n)
    m = max(1, int(round(fraction * n)))
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


def check_k(who: str, k: int) -> None:
    """Raise ``InvalidInputError`` unless the neighbour count ``k`` is at least 1."""
    if int(k) < 1:
        raise InvalidInputError(f"{who}: k must be >= 1; got {k}")


#: k as a share of the bank in the KNN paper (Sun et al., ICML 2022): k=50 of CIFAR-10's 50,000
#: training images and k=1000 of ImageNet's 1.28M (0.1 % and 0.08 %); NNGuide (Park et al., ICCV
#: 2023) keeps that share (k=10 of a 1 % ImageNet bank)
PAPER_K_SHARE = 0.001
#: a k above this share of the bank (ten times the papers') draws a warning
LARGE_K_SHARE = 0.01


class LargeKWarning(UserWarning):
    """k is a large share of a nearest-neighbour bank: the k-th neighbour is far for ID samples
    too, and the detector loses much of its power."""


def bank_rows(n: int, k: int, fit_fraction: float, seed: int, who: str) -> np.ndarray:
    """The fit rows of a nearest-neighbour bank (KNN, NNGuide): ``subsample(n, fit_fraction,
    seed)``, checked to hold at least ``k`` rows; a :class:`LargeKWarning` when ``k`` is more
    than ``LARGE_K_SHARE`` of them.

    k is not scaled with the bank on the user's behalf: a result must say which k made it, and
    the papers report k. The warning gives the k of the papers' share for this bank instead.
    """
    rows = subsample(n, fit_fraction, seed, who)
    if len(rows) < k:
        raise InvalidInputError(
            f"{who}: k={k} but the bank holds only {len(rows)} "
            f"training features (fit_fraction={fit_fraction}); lower k or fit on more data"
        )
    if k > LARGE_K_SHARE * len(rows):
        suggested = max(1, round(PAPER_K_SHARE * len(rows)))
        warnings.warn(
            f"{who}: k={k} is {k / len(rows):.1%} of its {len(rows):,}-row bank. The KNN paper "
            f"(Sun et al., ICML 2022) uses k of about {PAPER_K_SHARE:.1%} of the bank (k=50 of "
            "CIFAR-10's 50,000 training images, k=1000 of ImageNet's 1.28M); with a large share "
            "the k-th neighbour is far for ID samples too and AUROC falls towards 0.5. For this "
            f"bank the papers' share gives k={suggested}; or fit on more training images",
            LargeKWarning,
            stacklevel=4,
        )
    return rows


def labelled_rows(train: Activations, who: str) -> np.ndarray:
    """Indices of the rows with an ID class label (label >= 0); raises if there are none."""
    labels = np.asarray(train.labels)
    rows = np.flatnonzero(labels >= 0)
    if rows.size == 0:
        raise EmptyInputError(
            f"{who} needs class labels: none of the {len(labels)} training rows has a label >= 0 "
            "(fit on the labelled ID training set)"
        )
    if labels.max() >= train.num_classes:
        raise InvalidInputError(
            f"{who}: a training label is {int(labels.max())} but the model has "
            f"{train.num_classes} classes"
        )
    return rows


def class_means(
    features: np.ndarray, labels: np.ndarray, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class means of ``features`` (float64, (C, D)) and per-class counts ((C,), int64).

    Classes without samples get a zero mean and count 0.
    """
    dim = features.shape[1]
    sums = torch.zeros(num_classes, dim, dtype=torch.float64)
    counts = torch.zeros(num_classes, dtype=torch.int64)
    labels_t = torch.from_numpy(np.array(labels, dtype=np.int64))
    for rows in chunks(len(features)):
        sums.index_add_(0, labels_t[rows], as_tensor(features[rows]))
        counts += torch.bincount(labels_t[rows], minlength=num_classes)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(torch.float64)
    return means, counts


def feature_mean(features: np.ndarray) -> torch.Tensor:
    """The mean row of ``features`` in float64, (D,), chunked."""
    return class_means(features, np.zeros(len(features), dtype=np.int64), 1)[0][0]


class TrainMeanFit:
    """``_fit`` of the detectors whose one training statistic is the mean feature (fDBD, NCI).

    Stores ``train_mean_ = 1/N sum_i f_i`` (float64, (D,)) over every fit row; labels are not
    used. Mix in before ``Detector``: ``class FDBD(TrainMeanFit, Detector)``.
    """

    train_mean_: torch.Tensor

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        self.train_mean_ = feature_mean(features_of(train))


def scatter_matrix(
    features: np.ndarray, centres: torch.Tensor, labels: np.ndarray | None = None
) -> torch.Tensor:
    """``sum_i (x_i - c_i)(x_i - c_i)^T`` in float64, (D, D).

    ``c_i`` is ``centres`` itself when it is one vector (D,), else ``centres[labels[i]]``.
    Divide by the number of rows for the maximum-likelihood covariance (sklearn's
    ``EmpiricalCovariance``; Lee et al. 2018).
    """
    dim = features.shape[1]
    out = torch.zeros(dim, dim, dtype=torch.float64)
    labels_t = None if labels is None else torch.from_numpy(np.array(labels, dtype=np.int64))
    for rows in chunks(len(features)):
        x = as_tensor(features[rows])
        x = x - (centres if labels_t is None else centres[labels_t[rows]])
        out += x.T @ x
    return out


def whitener(covariance: torch.Tensor) -> torch.Tensor:
    """``M`` (D, r) with ``M M^T = pinv(covariance)``, so ``||(x - mu) M||^2`` is the Mahalanobis distance.

    The pseudo-inverse keeps eigenvalues above ``max(D, D) * eps * max eigenvalue``, the default
    of ``scipy.linalg.pinvh`` that sklearn's ``EmpiricalCovariance.precision_`` uses, so a
    singular covariance (fewer samples than dimensions) still gives finite distances.
    """
    cov = (covariance + covariance.T) / 2
    eigvals, eigvecs = torch.linalg.eigh(cov)
    cutoff = eigvals.abs().max() * cov.shape[0] * torch.finfo(torch.float64).eps
    keep = eigvals > cutoff
    return eigvecs[:, keep] / eigvals[keep].sqrt()


def min_sq_mahalanobis(
    features: np.ndarray, centres: torch.Tensor, whiten: torch.Tensor
) -> torch.Tensor:
    """``min_k (x - mu_k)^T pinv(S) (x - mu_k)`` for every row of ``features``, float64, (N,).

    Computed in whitened coordinates ``z = x M`` as ``||z||^2 - 2 z.m_k + ||m_k||^2`` in
    float64, chunk by chunk (no (N, K, D) tensor).
    """
    m = centres @ whiten  # (K, r)
    m_sq = (m * m).sum(dim=1)
    out = torch.empty(len(features), dtype=torch.float64)
    for rows in chunks(len(features)):
        z = as_tensor(features[rows]) @ whiten
        d = (z * z).sum(dim=1, keepdim=True) - 2.0 * (z @ m.T) + m_sq
        out[rows] = d.min(dim=1).values.clamp(min=0.0)
    return out


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]``, without a copy when ``rows`` is every row in order."""
    if len(rows) == len(array) and np.array_equal(rows, np.arange(len(array))):
        return array
    return np.asarray(array[rows])


def normalized_float32(features: np.ndarray) -> np.ndarray:
    """Unit-L2 rows as a C-contiguous float32 array (what faiss indexes), chunk by chunk."""
    out = np.empty(features.shape, dtype=np.float32)
    for rows in chunks(len(features)):
        out[rows] = l2_normalize(features[rows]).numpy()
    return out


def flat_index(bank: np.ndarray, metric: str) -> faiss.Index:
    """An exact faiss index (``IndexFlatL2`` or ``IndexFlatIP``) holding the float32 ``bank``."""
    bank = np.ascontiguousarray(bank, dtype=np.float32)
    index = faiss.IndexFlatL2(bank.shape[1]) if metric == "l2" else faiss.IndexFlatIP(bank.shape[1])
    index.add(bank)
    return index


def knn_search(index: faiss.Index, features: np.ndarray, k: int, who: str = "") -> np.ndarray:
    """The ``k`` best values for every L2-normalised row of ``features``: float32 (N, k).

    Squared L2 distances in ascending order for ``IndexFlatL2``, inner products in descending
    order for ``IndexFlatIP``; exact search, queries normalised and searched chunk by chunk.
    ``k`` larger than the bank is an error (k is a scoring setting: it may change after fit).
    """
    if k > index.ntotal:
        raise InvalidInputError(
            f"{who or 'nearest-neighbour search'}: k={k} but the bank holds only {index.ntotal} "
            "training features; lower k or fit on more data"
        )
    out = np.empty((len(features), k), dtype=np.float32)
    for rows in chunks(len(features)):
        values, _ = index.search(normalized_float32(features[rows]), k)
        out[rows] = values
    return out
