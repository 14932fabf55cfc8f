"""A tuned value at the edge of its search space: :func:`warn_edges` after every search.

A best value on the boundary of what was searched says the optimum may lie outside it: the
search should be widened before the value is trusted. :func:`edge_hits` finds, for each
numeric dimension of a space (:mod:`oodbench.tuning.space`):

* a list of at least :data:`MIN_LIST` distinct numbers: the best value is its smallest or
  largest (with two values every choice is an edge, so that says nothing);
* a :class:`~oodbench.tuning.space.Range`: the best value lies within :data:`EDGE_FRACTION` of
  the range's width from a bound (in log space for a log range; an integer range: on a bound).

:func:`warn_edges` raises one :class:`EdgeOfSpaceWarning` per such dimension, naming the
detector, the parameter, the value and the bound (shown once per run by the run's warning
aggregation).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

from oodbench.tuning.space import Dimension, Range

#: a range's best value this close to a bound (as a fraction of the width) is at its edge
EDGE_FRACTION = 0.01
#: the fewest distinct numbers a list needs before its ends count as edges
MIN_LIST = 3


class EdgeOfSpaceWarning(UserWarning):
    """A tuned hyper-parameter lies at the edge of its search grid or box."""


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _range_edge(value: float, dim: Range) -> tuple[str, float] | None:
    low, high = float(dim.low), float(dim.high)
    if dim.is_int:
        width, at = 0.0, value
    elif dim.log:
        width, at, low_t, high_t = (math.log(high) - math.log(low), math.log(value),
                                    math.log(low), math.log(high))
        if at - low_t <= EDGE_FRACTION * width:
            return "lower", dim.low
        if high_t - at <= EDGE_FRACTION * width:
            return "upper", dim.high
        return None
    else:
        width, at = high - low, value
    if at - low <= EDGE_FRACTION * width:
        return "lower", dim.low
    if high - at <= EDGE_FRACTION * width:
        return "upper", dim.high
    return None


def edge_hits(space: Mapping[str, Dimension], best: Mapping[str, Any]
              ) -> list[tuple[str, Any, str, Any]]:
    """``(parameter, value, "lower" | "upper", bound)`` for each dimension whose best value
    lies at an edge of ``space`` (see the module docstring)."""
    hits = []
    for name, dim in space.items():
        value: Any = best.get(name)
        if not _number(value):
            continue
        if isinstance(dim, Range):
            edge = _range_edge(float(value), dim)
            if edge is not None:
                hits.append((name, value, *edge))
            continue
        numbers_ = sorted({v for v in dim if _number(v)})
        if len(numbers_) < MIN_LIST or len(numbers_) != len(dim):
            continue
        if value == numbers_[0]:
            hits.append((name, value, "lower", numbers_[0]))
        elif value == numbers_[-1]:
            hits.append((name, value, "upper", numbers_[-1]))
    return hits


def warn_edges(detector: str, space: Mapping[str, Dimension], best: Mapping[str, Any]) -> None:
    """One :class:`EdgeOfSpaceWarning` per tuned value at an edge of ``space``."""
    for name, value, side, bound in edge_hits(space, best):
        kind = "box" if isinstance(space[name], Range) else "grid"
        warnings.warn(
            f"tune {detector!r}: {name}={value!r} lies at the {side} edge of its search {kind} "
            f"(bound {bound!r}); the optimum may lie beyond it: widen the search past {bound!r} "
            "before trusting this value", EdgeOfSpaceWarning, stacklevel=3)
