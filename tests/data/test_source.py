"""RelabeledSource: the same images under other labels, with its own fingerprint."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.data import ArraySource
from oodbench.data.source import RelabeledSource
from oodbench.errors import InvalidInputError


def test_relabeled_source():
    images = np.arange(4 * 8 * 8, dtype=np.uint8).reshape(4, 8, 8)
    parent = ArraySource(images, [3, 5, 3, 7], name="tiny")
    relabeled = RelabeledSource(parent, np.array([0, 1, 0, -1]))
    assert len(relabeled) == 4 and relabeled.name == "tiny" and relabeled.ids == parent.ids
    assert relabeled.labels.tolist() == [0, 1, 0, -1]
    assert np.array_equal(np.asarray(relabeled.load(2)), np.asarray(parent.load(2)))
    assert relabeled.fingerprint() != parent.fingerprint()
    assert relabeled.fingerprint() == RelabeledSource(parent, np.array([0, 1, 0, -1])).fingerprint()
    assert relabeled.fingerprint() != RelabeledSource(parent, np.array([0, 1, 1, -1])).fingerprint()
    with pytest.raises(InvalidInputError, match="3 labels for 4 images"):
        RelabeledSource(parent, np.array([0, 1, 0]))
