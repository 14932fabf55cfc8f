"""Input checks shared by every metric: coerce to 1-D numpy, refuse what has no meaning.

Scores may come as numpy arrays, torch tensors (any device, fp16/bf16/fp32/fp64/int/bool) or
Python sequences; they become float64 (exact for every fp16/bf16/fp32 value and for integers up
to 2**53). ``+inf`` and ``-inf`` are valid scores (a detector may be certain); NaN is not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from oodbench.errors import EmptyInputError, InvalidInputError, NonFiniteError

_SHOWN = 5  # how many offending indices an error message lists


def _to_numpy(x: Any) -> np.ndarray:
    """A numpy view/copy of ``x``; torch tensors are detached and moved to the CPU."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        t = x.detach().cpu()
        if t.is_floating_point():  # bf16 has no numpy dtype; fp64 holds every fp16/bf16 value
            t = t.double()
        return np.asarray(t.numpy())
    return np.asarray(x)


def _first(mask: NDArray[np.bool_]) -> str:
    idx = np.flatnonzero(mask)
    shown = ", ".join(str(i) for i in idx[:_SHOWN])
    return f"[{shown}{', ...' if idx.size > _SHOWN else ''}]"


def _one_dim(x: Any, name: str) -> np.ndarray:
    arr = _to_numpy(x)
    if arr.ndim != 1:
        what = "a scalar" if arr.ndim == 0 else f"shape {arr.shape}"
        raise InvalidInputError(
            f"{name} must be 1-D (one value per sample), got {what}; "
            "flatten it with .reshape(-1) if every entry is one sample"
        )
    if arr.size == 0:
        raise EmptyInputError(f"{name} is empty: it needs at least one sample")
    return arr


def as_scores(x: ArrayLike, name: str) -> NDArray[np.float64]:
    """``x`` as a 1-D float64 array of scores; ±inf kept, NaN refused.

    Raises:
        InvalidInputError: not 1-D, or not numeric (strings, objects, complex).
        EmptyInputError: no samples.
        NonFiniteError: NaN values; the message gives how many and the first indices.
    """
    arr = _one_dim(x, name)
    if arr.dtype.kind not in "biuf":
        raise InvalidInputError(
            f"{name} must hold real numbers, got dtype {arr.dtype}; pass the detector scores"
        )
    scores = arr.astype(np.float64, copy=False)
    nan = np.isnan(scores)
    if nan.any():
        raise NonFiniteError(
            f"{name} contains {int(nan.sum())} NaN value(s) out of {scores.size} "
            f"(first at indices {_first(nan)}); NaN scores have no rank: fix the detector "
            "(e.g. a log of 0 or 0/0) or drop those samples"
        )
    return scores


def as_bool(x: ArrayLike, name: str) -> NDArray[np.bool_]:
    """``x`` as a 1-D bool array; accepts bools or numbers that are all 0 or 1."""
    arr = _one_dim(x, name)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind not in "iuf":
        raise InvalidInputError(f"{name} must hold booleans (or 0/1), got dtype {arr.dtype}")
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        raise InvalidInputError(
            f"{name} must hold booleans (or 0/1), but {int(bad.sum())} value(s) are neither "
            f"(first at indices {_first(bad)}); pass e.g. predictions == labels"
        )
    return arr == 1


def as_class_indices(x: ArrayLike, name: str) -> NDArray[np.int64]:
    """``x`` as a 1-D int64 array of class indices (refuses floats: logits are not classes)."""
    arr = _one_dim(x, name)
    if arr.dtype.kind not in "iu":
        hint = " (logits or probabilities? take .argmax(1) first)" if arr.dtype.kind == "f" else ""
        raise InvalidInputError(
            f"{name} must hold integer class indices, got dtype {arr.dtype}{hint}"
        )
    return arr.astype(np.int64, copy=False)


def same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    """Raise :class:`InvalidInputError` unless ``a`` and ``b`` have one entry per sample each."""
    if a.shape[0] != b.shape[0]:
        raise InvalidInputError(
            f"{name_a} and {name_b} must have one entry per sample, got lengths "
            f"{a.shape[0]} and {b.shape[0]}"
        )


def check_tpr(tpr: float) -> float:
    """``tpr`` as a float in [0, 1]."""
    value = float(tpr)
    if not 0.0 <= value <= 1.0:
        raise InvalidInputError(f"tpr must be a fraction in [0, 1], got {tpr!r} (0.95, not 95)")
    return value


def fpr_key(tpr: float) -> str:
    """The key stem of FPR at ``tpr``: ``fpr95`` for 0.95, ``fpr99.5`` for 0.995."""
    return f"fpr{tpr * 100:g}"
