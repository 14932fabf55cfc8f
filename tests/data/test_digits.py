"""DigitsSource: scikit-learn's bundled digits."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from oodbench.data import DigitsSource
from oodbench.errors import InvalidInputError


def test_all_digits_match_sklearn() -> None:
    ref = load_digits()
    src = DigitsSource()
    assert len(src) == len(ref.target) == 1797
    assert np.array_equal(src.labels, ref.target)
    assert src.class_names == [str(d) for d in range(10)]
    img = src.load(10)
    assert img.mode == "RGB" and img.size == (8, 8)
    px = np.asarray(img)
    assert np.array_equal(px[..., 0], px[..., 2])
    assert np.array_equal(px[..., 0], np.rint(ref.images[10] * 255 / 16).astype(np.uint8))
    assert src.ids[10] == "digits:10"


def test_class_filter_keeps_digit_values_and_ids() -> None:
    ref = load_digits()
    src = DigitsSource(classes=[7, 2])
    keep = np.flatnonzero(np.isin(ref.target, [2, 7]))
    assert len(src) == keep.size
    assert set(src.labels.tolist()) == {2, 7} and src.classes == [2, 7]
    assert src.ids == [f"digits:{i}" for i in keep]
    assert np.array_equal(np.asarray(src.load(0))[..., 0], np.rint(ref.images[keep[0]] * 255 / 16))
    assert src.fingerprint() != DigitsSource().fingerprint()
    assert src.fingerprint() == DigitsSource(classes=(2, 7)).fingerprint()


def test_size_upscales_with_nearest() -> None:
    small, big = DigitsSource(classes=[0]), DigitsSource(classes=[0], size=16)
    a, b = np.asarray(small.load(3)), np.asarray(big.load(3))
    assert b.shape == (16, 16, 3)
    assert np.array_equal(b, a.repeat(2, axis=0).repeat(2, axis=1))
    assert small.fingerprint() != big.fingerprint()


@pytest.mark.parametrize("classes", [[], [10], [-1, 3]])
def test_bad_classes(classes: list[int]) -> None:
    with pytest.raises(InvalidInputError, match="subset of 0..9"):
        DigitsSource(classes)
