"""Maths shared by the activation-shaping detectors (ReAct, DICE, ASH, SCALE, VRA, LINe, RankFeat).

These detectors change the penultimate features ``f`` (or the linear head ``W, b``) and score the
result with the energy of the head, ``kappa = logsumexp(W f' + b)``. Everything here works on
cached arrays in row chunks (features may be memory-mapped float16 of a 100k-sample training
bank), in float64:

- ``percentile``: exact ``np.percentile`` (linear interpolation) over *all* entries of a large
  array without copying it (a chunked histogram selection), as ReAct's threshold needs.
- ``percentile_per_unit``: ``np.percentile(x, q, axis=0)`` in column chunks.
- ``head_energy``: ``logsumexp(shape(f) @ W.T + b)`` in row chunks.
- ``keep_count`` / ``sharpening``: the per-sample top-k and the ``exp(s1 / s2)`` factor of ASH
  and SCALE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from oodbench.detectors._math import as_tensor, neg_energy
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations

#: rough size of one float64 working chunk
CHUNK_BYTES = 64 * 2**20
_BINS = 4096  # histogram bins per selection pass
_DIRECT = 2**20  # a bin with at most this many values is sorted directly


def row_slices(n_rows: int, row_width: int) -> Iterator[slice]:
    """Consecutive row slices whose float64 copies take about ``CHUNK_BYTES``."""
    step = max(1, CHUNK_BYTES // (8 * max(1, row_width)))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def _flat_chunks(values: np.ndarray) -> Iterator[np.ndarray]:
    """Flat chunks of ``values`` in float32 (float64 input stays float64): order is preserved."""
    dtype = np.float64 if values.dtype == np.float64 else np.float32
    rows = values.reshape(len(values), -1) if values.ndim > 1 else values.reshape(-1, 1)
    for sl in row_slices(rows.shape[0], rows.shape[1]):
        yield np.asarray(rows[sl], dtype=dtype).ravel()


def _kth_smallest(values: np.ndarray, k: int) -> float:
    """The ``k``-th smallest entry (0-based) of ``values``, by repeated chunked histograms."""
    extremes = np.array([(c.min(), c.max()) for c in _flat_chunks(values)])
    lo, hi = float(extremes[:, 0].min()), float(extremes[:, 1].max())
    below = 0  # entries known to be < lo
    while lo < hi:
        scale = _BINS / (hi - lo)

        def bins(chunk: np.ndarray, lo: float = lo, hi: float = hi, scale: float = scale):
            inside = chunk[(chunk >= lo) & (chunk <= hi)]
            return inside, np.minimum(((inside - lo) * scale).astype(np.int64), _BINS - 1)

        counts = np.zeros(_BINS, dtype=np.int64)
        for chunk in _flat_chunks(values):
            counts += np.bincount(bins(chunk)[1], minlength=_BINS)
        cum = np.cumsum(counts)
        b = int(np.searchsorted(cum, k - below, side="right"))
        before = int(cum[b - 1]) if b else 0
        if counts[b] <= _DIRECT:
            picked = np.concatenate([v[i == b] for v, i in map(bins, _flat_chunks(values))])
            return float(np.sort(picked)[k - below - before])
        new_lo, new_hi = np.inf, -np.inf  # narrow the range to the values in bin b
        for v, i in map(bins, _flat_chunks(values)):
            member = v[i == b]
            if member.size:
                new_lo, new_hi = min(new_lo, float(member.min())), max(new_hi, float(member.max()))
        lo, hi = new_lo, new_hi
        below += before
    return lo


def percentile(values: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (linear interpolation) over every entry, in bounded memory."""
    n = int(np.prod(values.shape))
    if n == 0:
        raise InvalidInputError("cannot take a percentile of an empty array")
    if not 0.0 <= q <= 100.0:
        raise InvalidInputError(f"percentile must lie in [0, 100]; got {q}")
    index = (q / 100.0) * (n - 1)
    below = int(np.floor(index))
    frac = index - below
    a = _kth_smallest(values, below)
    if frac == 0.0:
        return a
    # the next order statistic: a itself when tied, else the smallest entry above a
    at_most_a, above = 0, np.inf
    for chunk in _flat_chunks(values):
        at_most_a += int(np.count_nonzero(chunk <= a))
        bigger = chunk[chunk > a]
        above = min(above, float(bigger.min())) if bigger.size else above
    b = a if at_most_a >= below + 2 else above
    # numpy's lerp, evaluated from the nearer end exactly as np.percentile does
    return float(a + (b - a) * frac) if frac < 0.5 else float(b - (b - a) * (1.0 - frac))


def percentile_per_unit(features: np.ndarray, q: float) -> np.ndarray:
    """``np.percentile(features, q, axis=0)`` for (N, D) features, in column chunks: (D,)."""
    n, d = features.shape
    step = max(1, CHUNK_BYTES // (8 * max(1, n)))
    return np.concatenate(
        [
            np.percentile(np.asarray(features[:, s : s + step], dtype=np.float64), q, axis=0)
            for s in range(0, d, step)
        ]
    )


def required(acts: Activations, name: str) -> np.ndarray:
    """``acts.<name>`` (e.g. ``"features"``), raising ``MissingActivationError`` when absent."""
    acts.require(name, who="this detector")
    return getattr(acts, name)


def head_tensors(acts: Activations) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear head ``(W (C, D), b (C,))`` of ``acts`` as float64 tensors."""
    return as_tensor(required(acts, "head_weight")), as_tensor(required(acts, "head_bias"))


def check_feature_dim(features: np.ndarray, weight: torch.Tensor, who: str) -> None:
    """Raise when the features do not match the head's input width."""
    if features.ndim != 2 or features.shape[1] != weight.shape[1]:
        raise InvalidInputError(
            f"{who}: features of shape {features.shape} do not match the linear head "
            f"(num_classes, D) = {tuple(weight.shape)}; fit and score activations of the same model"
        )


def head_energy(
    features: np.ndarray,
    weight: torch.Tensor,
    bias: torch.Tensor,
    shape: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> np.ndarray:
    """``logsumexp(shape(f) @ W.T + b)`` per row (the negative energy, T = 1), in row chunks."""
    out = np.empty(len(features), dtype=np.float64)
    for sl in row_slices(len(features), max(weight.shape)):
        f = as_tensor(features[sl])
        if shape is not None:
            f = shape(f)
        out[sl] = neg_energy((f @ weight.T + bias).numpy()).numpy()
    return out


def shaped_energy(
    acts: Activations, shape: Callable[[torch.Tensor], torch.Tensor], who: str
) -> np.ndarray:
    """``head_energy`` of ``acts``' own features and head after ``shape`` (the activation-shaping
    detectors' score: ReAct, ASH, SCALE, VRA), with the inputs checked."""
    weight, bias = head_tensors(acts)
    features = required(acts, "features")
    check_feature_dim(features, weight, who)
    return head_energy(features, weight, bias, shape)


def check_percentile(value: float, name: str, *, below_100: bool = False) -> None:
    """Raise unless ``0 <= value <= 100`` (``< 100`` with ``below_100``)."""
    if not (0.0 <= value < 100.0 if below_100 else 0.0 <= value <= 100.0):
        bound = "[0, 100)" if below_100 else "[0, 100]"
        raise InvalidInputError(f"{name} is a percentile in {bound} (percent); got {value}")


def keep_count(n: int, percentile: float) -> int:
    """How many of ``n`` activations survive pruning below the ``percentile`` (ASH convention).

    ``k = n - round(n * p / 100)`` (numpy rounding), at least 1.
    """
    return max(1, n - int(np.round(n * percentile / 100.0)))


def sharpening(total: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """``exp(s1 / s2)``: the factor of ASH-S and SCALE from s1 = ``total``, s2 = ``kept`` sums.

    s1 sums all activations of a sample, s2 its ``keep_count`` largest. Where ``s2 == 0`` (an
    all-zero row of non-negative activations) the row is zero and the factor is irrelevant; it
    is set to ``e`` (ratio 1) instead of NaN.
    """
    nonzero = kept != 0
    return torch.exp(torch.where(nonzero, total / torch.where(nonzero, kept, 1.0), 1.0))
