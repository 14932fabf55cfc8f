"""Tolerances for two computations of the same numbers that differ only in their rounding.

Another CPU runs other vector kernels (AVX-512, AVX2 or none), another BLAS kernel and another
thread count: sums and dot products accumulate in another order, and elementwise maths (``exp``,
``log``) may round differently by an ulp or so. Neither result is "the" answer, so a test that
compares two code paths, or a float32 path with a float64 reference, allows at least the
rounding error each of them can have. The bounds used here are the classical worst cases
(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 2002, §3.1 and §3.5), which
hold for every summation order:

- a sum of ``n`` terms, or a dot product of length ``n``: the error is at most
  ``gamma(n) * sum |terms|``, with ``gamma(n) = n u / (1 - n u)``;
- an elementwise function accurate to ``k`` ulps: a relative error of at most ``2 k u``;

where ``u`` is the unit roundoff (half an ulp of 1): ``2**-24`` in float32, ``2**-53`` in
float64. They stay orders of magnitude below what a changed formula, constant or step moves
(1e-4 relative and more), so the tests keep their power to see a real change.
"""

from __future__ import annotations

import numpy as np

#: unit roundoff of float32 and float64
U32 = 2.0**-24
U64 = 2.0**-53
#: ulps of error allowed to one elementwise exp or log: torch's SLEEF kernels are within 1 ulp,
#: NumPy's SIMD float32 exp within 2.52 ulps (its release notes), glibc's within 1 ulp
ULPS = 4


def gamma(n: int, u: float) -> float:
    """``n u / (1 - n u)``: the relative error bound of an ``n``-term sum or dot product."""
    return n * u / (1.0 - n * u)


def dot_error(x: np.ndarray, y: np.ndarray, u: float) -> np.ndarray:
    """The bound on the rounding error of every entry of ``x @ y.T`` (rows of ``x`` against
    rows of ``y``, length ``n``) computed in unit roundoff ``u`` in any order:
    ``gamma(n + 1) * (|x| @ |y|.T)`` (one more for the rounding of float64 inputs to float32)."""
    x, y = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(y, np.float64))
    return gamma(x.shape[-1] + 1, u) * (x @ y.T)


def scatter_error(centred: np.ndarray) -> np.ndarray:
    """The bound on |two float64 computations of ``centred.T @ centred``| per entry: sums of
    ``n`` products, each factor carrying the rounding of its centring (two more terms),
    ``gamma(n + 2) |centred|^T |centred|`` for each computation."""
    size = np.abs(np.asarray(centred, np.float64))
    return 2 * gamma(size.shape[0] + 2, U64) * (size.T @ size)


def auroc_slack(id_scores: np.ndarray, ood_scores: np.ndarray, id_bound: np.ndarray | float,
                ood_bound: np.ndarray | float) -> float:
    """How far an AUROC may move when every score is only known to within its bound (two
    computations that round differently): by the share of (ID, OOD) pairs whose intervals
    overlap, each of which may swap its order or tie (1 / (m n) each), plus float64 rounding.
    0 pairs is the usual case, and then the two AUROCs are equal to ~1e-12."""
    x = np.asarray(id_scores, np.float64)[:, None]
    y = np.asarray(ood_scores, np.float64)[None, :]
    bx = np.broadcast_to(np.asarray(id_bound, np.float64), x.shape[:1])[:, None]
    by = np.broadcast_to(np.asarray(ood_bound, np.float64), y.shape[1:])[None, :]
    close = np.count_nonzero(np.abs(x - y) <= bx + by)
    return close / (x.size * y.size) + 1e-12


def assert_within(actual: np.ndarray, desired: np.ndarray, bound: np.ndarray | float,
                  what: str = "") -> None:
    """``|actual - desired| <= bound`` element-wise (``bound`` broadcast: per entry or one
    number), with the worst entry in the message."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    assert actual.shape == desired.shape, (actual.shape, desired.shape)
    bound = np.broadcast_to(np.asarray(bound, np.float64), actual.shape)
    gap = np.abs(actual - desired)
    bad = ~(gap <= bound)  # NaN gaps fail too
    if bad.any():
        worst = np.unravel_index(np.argmax(np.where(bad, gap / np.maximum(bound, 1e-300), 0.0)),
                                 actual.shape)
        raise AssertionError(
            f"{what}{' ' if what else ''}{int(bad.sum())} of {actual.size} entries differ by more "
            f"than the rounding bound; worst at {tuple(int(i) for i in worst)}: {actual[worst]!r} "
            f"vs {desired[worst]!r}, |difference| {gap[worst]:.3g} > bound {bound[worst]:.3g}"
        )


#: how far two trainings of the same steps may drift apart, as a share of what training moved
#: each tensor (see :func:`assert_same_training`)
TRAINING_DRIFT = 1e-2


def assert_same_training(actual: dict, desired: dict, initial: dict,
                         drift: float = TRAINING_DRIFT) -> None:
    """Two trainings of the same steps from the same ``initial`` weights (one process against
    two that all-reduce their gradients) end at the same weights: per floating tensor,
    ``||actual - desired|| <= drift * ||desired - initial||`` (Frobenius norms).

    The all-reduce sums the ranks' gradients in another order than one process does, so each
    step differs by float32 rounding (~1e-7 relative), and the steps that follow carry and grow
    it: the non-linear training amplifies it by a factor no closed form bounds, and it differs
    between CPUs. An element-wise ``rtol`` fails on the one weight whose small value the drift
    happens to move (a 2-epoch digits run: 1.3e-5 on a weight of 0.008 on one CPU, within 1e-4
    on another). Measured against what the training moved, the drift was at most 7e-4 of the
    update per tensor for the digits CNN (2 epochs of SGD) and 5e-6 for CMA and NPOS (3 epochs;
    both on 2026-12-07's CPU), 14 times inside ``drift``; a wrong distributed step moves the update itself by a large share (summed
    instead of averaged gradients double it, a rank's shard left out changes the batches).
    A tensor training did not move must come out bit-identical."""
    assert actual.keys() == desired.keys(), sorted(set(actual) ^ set(desired))
    for key, want in desired.items():
        got, start = actual[key], initial[key]
        if not want.is_floating_point():
            assert bool((got == want).all()), key
            continue
        gap = float((got.double() - want.double()).norm())
        moved = float((want.double() - start.double()).norm())
        assert gap <= drift * moved, (
            f"{key}: the two trainings differ by {gap:.3g} (norm), more than {drift:g} of the "
            f"{moved:.3g} that training moved it")
