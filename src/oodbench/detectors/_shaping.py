"""Maths shared by the activation-shaping detectors (ReAct, DICE, ASH, SCALE, VRA, LINe, RankFeat).

These detectors change the penultimate features ``f`` (or the linear head ``W, b``) and score the
result with the energy of the head, ``kappa = logsumexp(W f' + b)``. Everything here works on
cached arrays in row chunks (features may be memory-mapped float16 of a 100k-sample training
bank) on the current compute backend (:mod:`oodbench.compute`):

- ``percentile``: exact ``np.percentile`` (linear interpolation) over *all* entries of a large
  array without copying it (one pass bracketed by a sample, else a chunked histogram
  selection), as ReAct's threshold needs. In NumPy on the host on both paths: a memory-bound
  pass over host arrays gains nothing from a trip to the GPU.
- ``percentile_per_unit``: ``np.percentile(x, q, axis=0)`` in column chunks.
- ``head_energy``: ``logsumexp(shape(f) @ W.T + b)`` in row chunks on the backend's device:
  the head product in the features' precision (float32 for float32 or float16 features), the
  energy finished in float64 (``_math.neg_energy``); about 1e-7 relative against float64.
- ``keep_count`` / ``sharpening``: the per-sample top-k and the ``exp(s1 / s2)`` factor of ASH
  and SCALE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from oodbench.compute import current, to_host
from oodbench.detectors._math import as_tensor, neg_energy
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations

#: rough size of one float64 working chunk of the CPU loops (RankFeat, GradNorm, LINe)
CHUNK_BYTES = 64 * 2**20
_BINS = 4096  # histogram bins per selection pass
_DIRECT = 2**20  # a bin with at most this many values is sorted directly
_SAMPLE = 2**20  # entries sampled to bracket a percentile
_BRACKET_LIMIT = 2**24  # entries a bracket may hold (64 MiB of float32)


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


def _sample(values: np.ndarray) -> np.ndarray:
    """The entries of about ``_SAMPLE`` evenly spaced rows of ``values`` (every row when that
    is all of them), flat and in no particular order."""
    rows = values.reshape(len(values), -1) if values.ndim > 1 else values.reshape(-1, 1)
    take = np.unique(np.linspace(0, len(rows) - 1, max(1, _SAMPLE // rows.shape[1])).astype(np.int64))
    dtype = np.float64 if values.dtype == np.float64 else np.float32
    picked = rows if len(take) == len(rows) else rows[take]
    return np.asarray(picked, dtype=dtype).ravel()


def _bracketed(chunks: Callable[[], Iterable[np.ndarray]], ranks: tuple[int, int], lo: float,
               hi: float) -> list[float] | None:
    """The order statistics ``ranks`` (0-based) of the entries ``chunks()`` yields when they lie
    in ``[lo, hi]``, from one pass that counts the entries below ``lo``, at ``lo`` and at ``hi``
    and keeps those in between; ``None`` when a rank falls outside or too many entries fall in
    between."""
    below = at_lo = at_hi = kept = 0
    inside: list[np.ndarray] = []
    for chunk in chunks():
        below += int(np.count_nonzero(chunk < lo))
        at_lo += int(np.count_nonzero(chunk == lo))
        if hi > lo:
            at_hi += int(np.count_nonzero(chunk == hi))
            inside.append(chunk[(chunk > lo) & (chunk < hi)])
            kept += inside[-1].size
            if kept > _BRACKET_LIMIT:
                return None
    middle = np.sort(np.concatenate(inside)) if inside else np.empty(0)
    found = []
    for rank in ranks:
        pos = rank - below
        if pos < 0 or pos >= at_lo + middle.size + at_hi:
            return None
        found.append(lo if pos < at_lo else float(middle[pos - at_lo]) if pos < at_lo + middle.size else hi)
    return found


def sampled_percentile(n: int, q: float, sample: np.ndarray,
                       chunks: Callable[[], Iterable[np.ndarray]],
                       exact: Callable[[tuple[int, int]], tuple[float, float]]) -> float:
    """``np.percentile`` (linear interpolation, NumPy's lerp) of ``n`` entries, exactly.

    ``chunks()`` yields all ``n`` entries (in any pieces and order), ``sample`` is a subset of
    them (any order; all of them when ``sample.size == n``) and ``exact(ranks)`` gives the two
    order statistics by another route. The two order statistics around ``q`` come from one
    pass over ``chunks()``, bracketed by the sample's quantiles (+-4, then +-32 standard errors
    of the sample quantile); should both brackets miss (or hold too many entries), from
    ``exact``. The answer is NumPy's to the last bit.
    """
    if n == 0:
        raise InvalidInputError("cannot take a percentile of an empty array")
    if not 0.0 <= q <= 100.0:
        raise InvalidInputError(f"percentile must lie in [0, 100]; got {q}")
    index = (q / 100.0) * (n - 1)
    below = int(np.floor(index))
    frac = index - below
    ranks = (below, min(below + 1, n - 1))
    m = sample.size
    if m == n:  # the sample is every entry
        picked = np.partition(sample, list(ranks))
        a, b = float(picked[ranks[0]]), float(picked[ranks[1]])
    else:
        centre = below / max(n - 1, 1) * (m - 1)
        bounds = [(int(centre - margin * np.sqrt(m)), int(np.ceil(centre + 1 + margin * np.sqrt(m))))
                  for margin in (4.0, 32.0)]
        inner = sorted({min(max(i, 0), m - 1) for pair in bounds for i in pair})
        picked = np.partition(sample, inner)
        for low, high in bounds:
            lo = float(picked[low]) if low > 0 else -np.inf  # the sample's ends bound nothing
            hi = float(picked[high]) if high < m - 1 else np.inf
            found = _bracketed(chunks, ranks, lo, hi)
            if found is not None:
                a, b = found
                break
        else:
            a, b = exact(ranks)
    if frac == 0.0:
        return a
    # numpy's lerp, evaluated from the nearer end exactly as np.percentile does
    return float(a + (b - a) * frac) if frac < 0.5 else float(b - (b - a) * (1.0 - frac))


def percentile(values: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (linear interpolation) over every entry, in bounded memory:
    ``sampled_percentile`` over flat chunks of ``values`` with a sample of evenly spaced rows,
    else the chunked histogram selection. Exact: the answer is NumPy's to the last bit.
    """
    def exact(ranks: tuple[int, int]) -> tuple[float, float]:
        a = _kth_smallest(values, ranks[0])
        return a, (a if ranks[1] == ranks[0] else _next_above(values, a, ranks[0]))

    n = int(np.prod(values.shape))
    sample = _sample(values) if n else np.empty(0)
    return sampled_percentile(n, q, sample, lambda: _flat_chunks(values), exact)


def _next_above(values: np.ndarray, a: float, rank: int) -> float:
    """The order statistic after ``a`` (the ``rank``-th): ``a`` itself when tied, else the
    smallest entry above it."""
    at_most_a, above = 0, np.inf
    for chunk in _flat_chunks(values):
        at_most_a += int(np.count_nonzero(chunk <= a))
        bigger = chunk[chunk > a]
        above = min(above, float(bigger.min())) if bigger.size else above
    return a if at_most_a >= rank + 2 else above


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


def row_percentiles(x: torch.Tensor, q: float) -> torch.Tensor:
    """``np.percentile(x, q, axis=1)`` (linear interpolation, NumPy's lerp) of a (B, n) tensor.

    NumPy's own on the NumPy path (its selection is twice as fast as torch's on the CPU); on
    the torch path one ``kthvalue`` and the next order statistic on the tensor's device.
    """
    if current().kind == "numpy":
        return torch.from_numpy(np.percentile(x.cpu().numpy(), q, axis=1))
    n = x.shape[1]
    index = (q / 100.0) * (n - 1)
    below = int(np.floor(index))
    frac = index - below
    a = torch.kthvalue(x, below + 1, dim=1).values
    if frac == 0.0:
        return a
    tied = (x <= a[:, None]).sum(dim=1) >= below + 2
    above = torch.where(x > a[:, None], x, torch.inf).min(dim=1).values
    b = torch.where(tied, a, above)
    return a + (b - a) * frac if frac < 0.5 else b - (b - a) * (1.0 - frac)


def required(acts: Activations, name: str) -> np.ndarray:
    """``acts.<name>`` (e.g. ``"features"``), raising ``MissingActivationError`` when absent."""
    acts.require(name, who="this detector")
    return getattr(acts, name)


def head_tensors(acts: Activations) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear head ``(W (C, D), b (C,))`` of ``acts`` as float64 CPU tensors."""
    return as_tensor(required(acts, "head_weight")), as_tensor(required(acts, "head_bias"))


def check_feature_dim(features: np.ndarray, weight: torch.Tensor | np.ndarray, who: str) -> None:
    """Raise when the features do not match the head's input width."""
    if features.ndim != 2 or features.shape[1] != weight.shape[1]:
        raise InvalidInputError(
            f"{who}: features of shape {features.shape} do not match the linear head "
            f"(num_classes, D) = {tuple(weight.shape)}; fit and score activations of the same model"
        )


def head_energy(
    features: np.ndarray,
    weight: torch.Tensor | np.ndarray,
    bias: torch.Tensor | np.ndarray,
    shape: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> np.ndarray:
    """``logsumexp(shape(f) @ W.T + b)`` per row (the negative energy, T = 1), float64 (N,).

    Row chunks of ``features`` go to the backend's device in their precision (float32, or
    float64 for float64 features); ``shape`` gets them there and may return any float dtype.
    """
    backend = current()
    dtype = torch.float64 if features.dtype == np.float64 else torch.float32
    weight_t, bias_t = backend.tensor(weight, dtype), backend.tensor(bias, dtype)
    out = np.empty(len(features), dtype=np.float64)

    def one(rows: slice) -> None:
        f = backend.tensor(features[rows], dtype)
        if shape is not None:
            f = shape(f).to(dtype)
        out[rows] = to_host(neg_energy(torch.addmm(bias_t, f, weight_t.T)))

    backend.run_chunks(backend.rows(len(features), max(weight_t.shape)), one)
    return out


def shaped_energy(
    acts: Activations, shape: Callable[[torch.Tensor], torch.Tensor], who: str
) -> np.ndarray:
    """``head_energy`` of ``acts``' own features and head after ``shape`` (the activation-shaping
    detectors' score: ReAct, ASH, SCALE, VRA), with the inputs checked."""
    weight, bias = required(acts, "head_weight"), required(acts, "head_bias")
    features = required(acts, "features")
    check_feature_dim(features, weight, who)
    return head_energy(features, weight, bias, shape)


def keep_count(n: int, percentile: float) -> int:
    """How many of ``n`` activations survive pruning below the ``percentile`` (ASH convention).

    ``k = n - round(n * p / 100)`` (numpy rounding), at least 1.
    """
    return max(1, n - int(np.round(n * percentile / 100.0)))


def sharpening(features: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """``exp(s1 / s2)`` per row: the factor of ASH-S and SCALE, float64 (N,).

    s1 sums all activations of a sample (``features``, (N, D)), s2 its ``keep_count`` largest
    (``kept``, (N, k)); both sums accumulate in float64, since the factor exponentiates their
    ratio. Where ``s2 == 0`` (an all-zero row of non-negative activations) the row is zero and
    the factor is irrelevant; it is set to ``e`` (ratio 1) instead of NaN.
    """
    total = features.sum(dim=1, dtype=torch.float64)
    kept_sum = kept.sum(dim=1, dtype=torch.float64)
    nonzero = kept_sum != 0
    return torch.exp(torch.where(nonzero, total / torch.where(nonzero, kept_sum, 1.0), 1.0))
