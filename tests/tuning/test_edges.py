"""A tuned value at the edge of its search grid or box warns, naming the parameter, the value and
the bound (oodbench.tuning.edges); an interior value, a two-value list and a non-numeric list
do not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oodbench
from oodbench.extract.activations import Activations
from oodbench.tuning.edges import EDGE_FRACTION, EdgeOfSpaceWarning, edge_hits
from oodbench.tuning.space import Range


@pytest.mark.parametrize(("space", "best", "expected"), [
    ({"k": [1, 5, 10]}, {"k": 10}, [("k", 10, "upper", 10)]),
    ({"k": [1, 5, 10]}, {"k": 1}, [("k", 1, "lower", 1)]),
    ({"k": [1, 5, 10]}, {"k": 5}, []),
    ({"k": [1, 10]}, {"k": 10}, []),  # two values: every choice is an edge, nothing to say
    ({"metric": ["a", "b", "c"]}, {"metric": "c"}, []),
    # a box: within EDGE_FRACTION of the width from a bound
    ({"p": Range(80.0, 99.0)}, {"p": 99.0 - EDGE_FRACTION * 19.0 / 2}, [("p", 99.0 - 0.095, "upper", 99.0)]),
    ({"p": Range(80.0, 99.0)}, {"p": 80.0 + 2 * EDGE_FRACTION * 19.0}, []),
    ({"k": Range(1, 200)}, {"k": 1}, [("k", 1, "lower", 1)]),
    ({"k": Range(1, 200)}, {"k": 2}, []),
    # a log box: the fraction of the log width (log 1000: 0.069 -> 1.07 is at the edge)
    ({"t": Range(1.0, 1000.0, log=True)}, {"t": 1.05}, [("t", 1.05, "lower", 1.0)]),
    ({"t": Range(1.0, 1000.0, log=True)}, {"t": 1.2}, []),
])
def test_edge_hits(space, best, expected):
    hits = edge_hits(space, best)
    assert [(n, s, b) for n, _, s, b in hits] == [(n, s, b) for n, _, s, b in expected]
    for (_, value, _, _), (_, want, _, _) in zip(hits, expected):
        assert value == pytest.approx(want, rel=1e-12)  # the best value itself, passed through


def _acts(shift: float, seed: int) -> Activations:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(60, 4)) + shift * np.eye(4)[np.arange(60) % 4]
    return Activations(logits=logits, labels=np.arange(60) % 4, ids=np.arange(60).astype(str))


def test_tune_warns_for_a_best_value_at_the_grid_edge():
    """Energy's AUROC here grows with the temperature (the ID logits have a larger margin), so
    the largest of three temperatures wins: at the edge of the grid."""
    id_val, ood_val = _acts(3.0, 0), _acts(0.0, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = oodbench.tune("energy", {"temperature": [0.01, 0.1, 1.0]}, id_val, ood_val)
    edge = [str(w.message) for w in caught if issubclass(w.category, EdgeOfSpaceWarning)]
    assert result.best_params == {"temperature": 1.0}
    assert edge == ["tune 'energy': temperature=1.0 lies at the upper edge of its search grid "
                    "(bound 1.0); the optimum may lie beyond it: widen the search past 1.0 "
                    "before trusting this value"]
