"""Training statistics shared by the feature-based detectors.

Class means, scatter (covariance) matrices, Mahalanobis whitening, minimum Mahalanobis
distances, the train-mean fit, row chunking and subsampling. Everything streams over rows in
chunks of the current compute backend (:mod:`oodbench.compute`: the CPU, or torch on a GPU) so
that 50k x 2048 features against a 100k-sample bank fit in memory. Statistics (sums, scatter
matrices, eigendecompositions) accumulate in float64 on the backend's device: the whitening
amplifies any rounding of the covariance by its condition number, so float32 is not enough
there. Nearest-neighbour search is in :mod:`oodbench.detectors._neighbours`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Annotated

import numpy as np
import scipy.linalg
import torch

from oodbench.compute import current, to_host
from oodbench.constraints import Integer
from oodbench.errors import EmptyInputError, InvalidInputError
from oodbench.extract.activations import Activations

#: rows per chunk of the light detectors' CPU loops (``chunks``)
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


def by_chunks(
    n: int, fn: Callable[[slice], torch.Tensor | np.ndarray], width: int | None = None,
    itemsize: int = 4,
) -> np.ndarray:
    """``fn(rows)`` evaluated chunk by chunk over ``range(n)`` and stacked into a float64 (N,) array.

    Chunks hold ``CHUNK`` rows, or, given the row ``width``, the current backend's chunks of
    ``width``-wide rows of ``itemsize`` bytes (``Backend.rows``: equal slices, spread over the
    CPU's workers); ``fn`` may return a tensor on any device. On the CPU the
    chunks run on single-threaded workers (``Backend.run_chunks``), so ``fn`` must not depend
    on the order of the chunks.
    """
    backend = current()
    out = np.empty(n, dtype=np.float64)

    def one(rows: slice) -> None:
        out[rows] = to_host(fn(rows))

    backend.run_chunks(chunks(n) if width is None else backend.rows(n, width, itemsize), one)
    return out


def subsample(n: int, fraction: float, seed: int, who: str) -> np.ndarray:
    """Sorted indices of a random ``fraction`` of ``n`` rows (all rows when ``fraction == 1``)."""
    if not 0.0 < fraction <= 1.0:
        raise InvalidInputError(f"{who}: fit_fraction must be in (0, 1]; got {fraction}")
    if fraction == 1.0:
        return np.arange(n)
    m = max(1, int(round(fraction * n)))
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


#: a neighbour count (KNN, NNGuide)
Neighbours = Annotated[int, Integer(min=1, note="a number of nearest neighbours")]


#: k as a share of the bank in the KNN paper (Sun et al., ICML 2022): k=50 of CIFAR-10's 50,000
#: training images and k=1000 of ImageNet's 1.28M (0.1 % and 0.08 %); NNGuide (Park et al., ICCV
#: 2023) keeps that share (k=10 of a 1 % ImageNet bank)
PAPER_K_SHARE = 0.001
#: a k above this share of the bank (ten times the papers') draws a warning
LARGE_K_SHARE = 0.01


class LargeKWarning(UserWarning):
    """k is a large share of a nearest-neighbour bank: the k-th neighbour is far for ID samples
    too, and the detector loses much of its power."""


def paper_k(bank_size: int) -> int:
    """The k of the papers' share (``PAPER_K_SHARE``) for a bank of ``bank_size`` rows, rounded,
    and at least 1 (a bank under ~1,500 rows has a papers' k below 1.5: the smallest k, 1)."""
    return max(1, round(PAPER_K_SHARE * bank_size))


def large_k_message(who: str, k: int, bank_size: int) -> str | None:
    """The :class:`LargeKWarning` text for ``k`` neighbours in a ``bank_size``-row bank, or
    ``None`` when ``k`` is fine: at most ``LARGE_K_SHARE`` of the bank, or already the papers'
    k for this bank (:func:`paper_k`: a k that cannot be lowered towards the papers' share)."""
    papers = paper_k(bank_size)
    if k <= LARGE_K_SHARE * bank_size or k <= papers:
        return None
    exact = PAPER_K_SHARE * bank_size
    why = (f"{PAPER_K_SHARE:.1%} of {bank_size:,} rows is {exact:.3g}, so the papers' share gives "
           f"k={papers} for this bank")
    if papers == 1 and exact < 1:
        why += " (the smallest k)"
    return (
        f"{who}: k={k} is {k / bank_size:.1%} of its {bank_size:,}-row bank, more than "
        f"{LARGE_K_SHARE / PAPER_K_SHARE:.0f} times the papers' share. The KNN paper (Sun et al., "
        f"ICML 2022) uses k of about {PAPER_K_SHARE:.1%} of the bank (k=50 of CIFAR-10's 50,000 "
        "training images, k=1000 of ImageNet's 1.28M); with a large share the k-th neighbour is "
        f"far for ID samples too and AUROC falls towards 0.5. {why}: lower k to {papers}, or fit "
        f"on more training images (k={k} is the papers' share of a "
        f"{round(k / PAPER_K_SHARE):,}-row bank)"
    )


def bank_rows(n: int, k: int, fit_fraction: float, seed: int, who: str) -> np.ndarray:
    """The fit rows of a nearest-neighbour bank (KNN, NNGuide): ``subsample(n, fit_fraction,
    seed)``, checked to hold at least ``k`` rows; a :class:`LargeKWarning` when ``k`` is more
    than ``LARGE_K_SHARE`` of them and above the papers' k for the bank (:func:`large_k_message`).

    k is not scaled with the bank on the user's behalf: a result must say which k made it, and
    the papers report k. The warning gives the k of the papers' share for this bank instead.
    """
    rows = subsample(n, fit_fraction, seed, who)
    if len(rows) < k:
        raise InvalidInputError(
            f"{who}: k={k} but the bank holds only {len(rows)} "
            f"training features (fit_fraction={fit_fraction}); lower k or fit on more data"
        )
    message = large_k_message(who, k, len(rows))
    if message is not None:
        warnings.warn(message, LargeKWarning, stacklevel=4)
    return rows


def check_k_in_bank(k: int, bank_size: int, who: str) -> None:
    """Raise when ``k`` exceeds the bank: k only affects scoring (a tuning grid changes it after
    ``fit``), so the scoring checks it again."""
    if k > bank_size:
        raise InvalidInputError(
            f"{who}: k={k} but the bank holds only {bank_size} training features; lower k or fit "
            "on more data"
        )


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

    On the current backend's device. Classes without samples get a zero mean and count 0.
    """
    backend = current()
    dim = features.shape[1]
    sums = torch.zeros(num_classes, dim, dtype=torch.float64, device=backend.device)
    labels_t = backend.tensor(np.asarray(labels, dtype=np.int64), torch.int64)
    for rows in backend.rows(len(features), dim, 8):
        sums.index_add_(0, labels_t[rows], backend.tensor(features[rows], torch.float64))
    counts = torch.bincount(labels_t, minlength=num_classes)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(torch.float64)
    return means, counts


def feature_mean(features: np.ndarray) -> torch.Tensor:
    """The mean row of ``features`` in float64, (D,), chunked, on the backend's device."""
    return class_means(features, np.zeros(len(features), dtype=np.int64), 1)[0][0]


class TrainMeanFit:
    """``_fit`` of the detectors whose one training statistic is the mean feature (fDBD, NCI).

    Stores ``train_mean_ = 1/N sum_i f_i`` (float64, (D,), on the CPU) over every fit row;
    labels are not used. Mix in before ``Detector``: ``class FDBD(TrainMeanFit, Detector)``.
    """

    train_mean_: torch.Tensor

    def _fit(self, train: Activations | None, model: object) -> None:
        assert train is not None
        self.train_mean_ = feature_mean(features_of(train)).cpu()


def scatter_matrix(
    features: np.ndarray, centres: torch.Tensor, labels: np.ndarray | None = None
) -> torch.Tensor:
    """``sum_i (x_i - c_i)(x_i - c_i)^T`` in float64, (D, D), on the backend's device.

    ``c_i`` is ``centres`` itself when it is one vector (D,), else ``centres[labels[i]]``.
    Divide by the number of rows for the maximum-likelihood covariance (sklearn's
    ``EmpiricalCovariance``; Lee et al. 2018). Float64 throughout: Mahalanobis whitening
    amplifies the covariance's rounding by its condition number, and ViM's split between the
    principal and the residual space turns on eigenvalue gaps that can be 1e-6 of the largest
    (float32 chunk products, even summed in float64, moved ViM's scores by 1e-5 relative on
    ``speed/bench_detectors.py``'s arrays, against 1e-7 for float64).
    """
    backend = current()
    dim = features.shape[1]
    # chunks of the backend's size, but of at least ``dim`` rows: each chunk adds a D x D
    # product, and the additions should stay a small share of the work
    step = max(dim, backend.chunk_bytes // (8 * dim))
    if backend.kind == "numpy":
        return torch.from_numpy(_host_scatter(features, centres.cpu().numpy(), labels, step))
    centres = centres.to(backend.device, torch.float64)
    out = torch.zeros(dim, dim, dtype=torch.float64, device=backend.device)
    labels_t = (
        None if labels is None else backend.tensor(np.asarray(labels, dtype=np.int64), torch.int64)
    )
    for rows in chunks(len(features), step):
        x = backend.tensor(features[rows], torch.float64)
        x = x - (centres if labels_t is None else centres[labels_t[rows]])
        out.addmm_(x.T, x)
    return out


def _host_scatter(
    features: np.ndarray, centres: np.ndarray, labels: np.ndarray | None, step: int
) -> np.ndarray:
    """``scatter_matrix`` on the host: each centred float64 chunk ``X`` adds ``X^T X`` by a BLAS
    ``dsyrk`` (one triangle: half the products of ``X.T @ X``) into a column-major
    accumulator, mirrored once at the end."""
    dim = features.shape[1]
    lower = np.zeros((dim, dim), dtype=np.float64, order="F")
    for rows in chunks(len(features), step):
        centre = centres if labels is None else centres[np.asarray(labels[rows], dtype=np.int64)]
        x = np.subtract(features[rows], centre, dtype=np.float64)
        # the row-major (n, D) chunk is the column-major (D, n) matrix A = X^T: C += A A^T
        lower = scipy.linalg.blas.dsyrk(1.0, x.T, beta=1.0, c=lower, lower=1, overwrite_c=1)
    full = lower + lower.T  # the untouched upper triangle is zero: the diagonal is doubled
    np.fill_diagonal(full, np.diagonal(lower))
    return full


def symmetric_eigh(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (ascending) and eigenvectors of a symmetric float64 matrix, on its device.

    The NumPy path uses SciPy's LAPACK (``dsyevd``); the torch path ``torch.linalg.eigh`` on the
    device. Both in float64: a float32 eigendecomposition of a ViM scatter matrix moved its
    residual-space norms by 2.5e-4 relative in our measurement (nearly equal eigenvalues at the
    principal/residual split swap places).
    """
    sym = (matrix + matrix.T) / 2
    if current().kind == "numpy":
        values, vectors = scipy.linalg.eigh(sym.cpu().numpy(), driver="evd", check_finite=False)
        return torch.from_numpy(values), torch.from_numpy(vectors)
    return torch.linalg.eigh(sym)


def whitener(covariance: torch.Tensor) -> torch.Tensor:
    """``M`` (D, r) with ``M M^T = pinv(covariance)``, so ``||(x - mu) M||^2`` is the Mahalanobis distance.

    The pseudo-inverse keeps eigenvalues above ``max(D, D) * eps * max eigenvalue``, the default
    of ``scipy.linalg.pinvh`` that sklearn's ``EmpiricalCovariance.precision_`` uses, so a
    singular covariance (fewer samples than dimensions) still gives finite distances.
    """
    eigvals, eigvecs = symmetric_eigh(covariance)
    cutoff = eigvals.abs().max() * covariance.shape[0] * torch.finfo(torch.float64).eps
    keep = eigvals > cutoff
    return eigvecs[:, keep] / eigvals[keep].sqrt()


def min_sq_mahalanobis(
    features: np.ndarray, centres: torch.Tensor, whiten: torch.Tensor
) -> torch.Tensor:
    """``min_k (x - mu_k)^T pinv(S) (x - mu_k)`` for every row of ``features``, float64, (N,).

    In whitened coordinates ``z = (x - c) M`` about the mean ``c`` of the centres, as
    ``||z||^2 - 2 z.m_k + ||m_k||^2`` (``m_k = (mu_k - c) M``), chunk by chunk on the backend's
    device (no (N, K, D) tensor), all in float64: the whitening multiplies rounding errors by
    the covariance's condition number. Float32 products, measured against this on synthetic
    512-d features, were off by up to 5e-6 relative at condition number 3e5, 4e-5 at 1.5e8 and
    9e-4 at 7e10. Centring on ``c`` keeps the three terms of the sum small against the distance.
    """
    backend = current()
    whiten = whiten.to(backend.device, torch.float64)
    centres = centres.to(backend.device, torch.float64)
    origin = centres.mean(dim=0)
    m = (centres - origin) @ whiten  # (K, r)
    m_sq = (m * m).sum(dim=1)
    out = torch.empty(len(features), dtype=torch.float64, device=backend.device)

    def one(rows: slice) -> None:
        z = (backend.tensor(features[rows], torch.float64) - origin) @ whiten
        d = torch.addmm(m_sq, z, m.T, alpha=-2.0).add_((z * z).sum(dim=1, keepdim=True))
        out[rows] = d.min(dim=1).values.clamp(min=0.0)

    backend.run_chunks(backend.rows(len(features), max(features.shape[1], len(m)), 8), one)
    return out


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]``, without a copy when ``rows`` is every row in order."""
    if len(rows) == len(array) and np.array_equal(rows, np.arange(len(array))):
        return array
    return np.asarray(array[rows])
