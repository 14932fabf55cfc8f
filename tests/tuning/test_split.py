"""split_by_class: every class with enough samples gives one to validation, the rest fit."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.errors import InvalidInputError
from oodbench.tuning.split import split_by_class


def test_split():
    labels = np.array([0, 0, 0, 1, 2, 2, -1, 3, 3, 3, 3])
    fit, val = split_by_class(labels, seed=0)
    assert np.array_equal(np.sort(np.concatenate([fit, val])), np.arange(labels.size))
    assert sorted(labels[val].tolist()) == [0, 2, 3]  # one of each class with >= 2 samples
    assert set(labels[fit]) == {-1, 0, 1, 2, 3}  # and every such class keeps a fit sample
    again, other = split_by_class(labels, seed=0), split_by_class(labels, seed=5)
    assert np.array_equal(again[1], val)
    assert not all(np.array_equal(split_by_class(labels, seed=s)[1], val) for s in range(1, 6))
    assert other[1].size == 3
    fit2, val2 = split_by_class(labels, per_class=2, min_per_class=3)
    assert sorted(labels[val2].tolist()) == [0, 0, 3, 3]


def test_errors():
    with pytest.raises(InvalidInputError, match="no class has 2 or more"):
        split_by_class(np.array([0, 1, 2]))
    with pytest.raises(InvalidInputError, match="per_class < min_per_class"):
        split_by_class(np.array([0, 0]), per_class=2, min_per_class=2)
