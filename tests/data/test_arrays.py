"""ArraySource: in-memory images."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.data import ArraySource
from oodbench.errors import EmptyInputError, InvalidInputError, NonFiniteError


def test_uint8_rgb_and_grey() -> None:
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (3, 5, 4, 3), dtype=np.uint8)
    src = ArraySource(rgb, [0, 1, -1], name="toy", class_names=["a", "b"])
    assert len(src) == 3 and src.ids == ["toy:0", "toy:1", "toy:2"]
    assert src.labels.tolist() == [0, 1, -1] and src.labels.dtype == np.int64
    img = src.load(1)
    assert img.mode == "RGB" and img.size == (4, 5) and np.array_equal(np.asarray(img), rgb[1])
    grey = rng.integers(0, 256, (2, 6, 6), dtype=np.uint8)
    out = np.asarray(ArraySource(grey, [0, 0]).load(0))
    assert out.shape == (6, 6, 3) and all(np.array_equal(out[..., c], grey[0]) for c in range(3))
    assert np.array_equal(
        ArraySource(grey[..., None], [0, 0]).images, ArraySource(grey, [0, 0]).images
    )


def test_float_images_are_quantised() -> None:
    x = np.array([[[0.0, 1.0], [0.5, 0.2]]])  # (1, 2, 2)
    px = np.asarray(ArraySource(x, [0]).load(0))[..., 0]
    assert px.tolist() == [[0, 255], [128, 51]]  # round(255 * x)


def test_source_is_a_copy_and_fingerprint_tracks_content() -> None:
    x = np.zeros((4, 3, 3, 3), dtype=np.uint8)
    src = ArraySource(x, [0, 1, 0, 1])
    fp = src.fingerprint()
    x[0, 0, 0, 0] = 7  # changing the caller's array does not change the source
    assert src.fingerprint() == fp and np.asarray(src.load(0)).max() == 0
    assert ArraySource(x, [0, 1, 0, 1]).fingerprint() != fp  # one pixel differs
    assert ArraySource(np.zeros_like(x), [0, 1, 0, 1]).fingerprint() == fp
    assert ArraySource(np.zeros_like(x), [1, 1, 0, 1]).fingerprint() != fp
    assert ArraySource(np.zeros_like(x), [0, 1, 0, 1], name="other").fingerprint() != fp
    y = np.arange(4 * 27, dtype=np.uint8).reshape(4, 3, 3, 3)
    assert ArraySource(y, [0] * 4).fingerprint() != ArraySource(y[::-1], [0] * 4).fingerprint()
    assert src.subset([2, 3]).labels.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("images", "labels", "error", "match"),
    [
        (np.zeros((2, 3, 4, 4), np.uint8), [0, 0], InvalidInputError, "channels first"),
        (np.zeros((2, 4), np.uint8), [0, 0], InvalidInputError, "shape"),
        (np.full((1, 2, 2), 1.5), [0], InvalidInputError, r"\[0, 1\]"),
        (np.full((1, 2, 2), np.nan), [0], NonFiniteError, "NaN"),
        (np.zeros((1, 2, 2), np.int32), [0], InvalidInputError, "dtype int32"),
        (np.zeros((2, 2, 2), np.uint8), [0], InvalidInputError, "2 integers"),
        (np.zeros((2, 2, 2), np.uint8), [0.5, 1], InvalidInputError, "integers"),
        (np.zeros((2, 2, 2), np.uint8), [0, -3], InvalidInputError, ">= -1"),
        (np.zeros((0, 2, 2), np.uint8), [], EmptyInputError, "no images"),
    ],
)
def test_bad_input(images: np.ndarray, labels: list, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ArraySource(images, labels)


def test_custom_ids() -> None:
    src = ArraySource(np.zeros((2, 2, 2), np.uint8), [0, 0], ids=["p", "q"])
    assert src.ids == ["p", "q"]
    with pytest.raises(InvalidInputError, match="1 ids for 2 images"):
        ArraySource(np.zeros((2, 2, 2), np.uint8), [0, 0], ids=["p"])
