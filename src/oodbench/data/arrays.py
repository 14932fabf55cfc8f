"""``ArraySource``: images held in memory as a numpy array."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from PIL import Image

from oodbench.data._images import readonly_labels
from oodbench.data.source import Source
from oodbench.errors import EmptyInputError, InvalidInputError, NonFiniteError


def as_uint8_rgb(images: np.ndarray, *, what: str = "images") -> np.ndarray:
    """A read-only uint8 copy of shape (N, H, W, 3).

    Accepts uint8 (N, H, W), (N, H, W, 1) or (N, H, W, 3), or floats in [0, 1] which are
    quantised as ``round(255 * x)`` (PIL images are 8-bit). Grey images are repeated to RGB.
    """
    arr = np.asarray(images)
    if arr.ndim == 4 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim == 3:
        arr = np.repeat(arr[..., None], 3, axis=-1)
    if arr.ndim != 4 or arr.shape[-1] != 3:
        hint = " (channels first? use images.transpose(0, 2, 3, 1))" if arr.ndim == 4 else ""
        raise InvalidInputError(
            f"{what} must have shape (N, H, W) or (N, H, W, 3); got {np.asarray(images).shape}{hint}"
        )
    if arr.dtype == np.uint8:
        out = arr.copy()
    elif np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise NonFiniteError(f"{what} contain NaN or inf values")
        if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
            raise InvalidInputError(
                f"float {what} must lie in [0, 1]; got [{arr.min():.4g}, {arr.max():.4g}] "
                "(divide by 255, or pass uint8)"
            )
        out = np.rint(arr * 255.0).astype(np.uint8)
    else:
        raise InvalidInputError(f"{what} must be uint8 or float in [0, 1]; got dtype {arr.dtype}")
    out = np.ascontiguousarray(out)
    out.setflags(write=False)
    return out


class ArraySource(Source):
    """In-memory images and labels.

    Args:
        images: uint8 (N, H, W) / (N, H, W, 3), or float in [0, 1] (quantised to uint8). The
            array is copied, so changing it afterwards does not change the source.
        labels: N integers, ``-1`` for samples without an ID class.
        name: used in the ids ``"<name>:<i>"`` and in logs.
        class_names: names of the label indices, when known.
        ids: one identifier per image, instead of ``"<name>:<i>"``.

    ``fingerprint()`` is the sha256 of the name, the ids, the shape, the pixel bytes and the
    labels (computed once: the source is immutable).
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: Sequence[int] | np.ndarray,
        *,
        name: str = "arrays",
        class_names: Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
    ):
        self._images = as_uint8_rgb(images)
        n = len(self._images)
        if n == 0:
            raise EmptyInputError(f"ArraySource {name!r} holds no images")
        lab = np.asarray(labels)
        if lab.shape != (n,) or not (
            np.issubdtype(lab.dtype, np.integer)
            or (np.issubdtype(lab.dtype, np.floating) and np.array_equal(lab, np.round(lab)))
        ):
            raise InvalidInputError(
                f"ArraySource {name!r}: labels must be {n} integers (one per image); got shape "
                f"{lab.shape}, dtype {lab.dtype}"
            )
        if lab.min() < -1:
            raise InvalidInputError(
                f"ArraySource {name!r}: labels must be >= -1 (-1 = no ID class); got {lab.min()}"
            )
        self._labels = readonly_labels(lab)
        if ids is not None and len(ids) != n:
            raise InvalidInputError(f"ArraySource {name!r}: {len(ids)} ids for {n} images")
        self._ids = list(ids) if ids is not None else [f"{name}:{i}" for i in range(n)]
        self.name = name
        self.class_names = list(class_names) if class_names is not None else None
        self._fingerprint: str | None = None

    @property
    def images(self) -> np.ndarray:
        """The (N, H, W, 3) uint8 pixels (read-only)."""
        return self._images

    def __len__(self) -> int:
        return len(self._images)

    def load(self, index: int) -> Image.Image:
        return Image.fromarray(self._images[index])

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(f"oodbench/ArraySource/v1\n{self.name}\n".encode())
            h.update("\0".join(self._ids).encode())
            h.update(repr(self._images.shape).encode())
            h.update(self._images.tobytes())
            h.update(self._labels.astype("<i8").tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint
