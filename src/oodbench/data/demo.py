"""The offline demo's data: digits as ID and class-OOD, real photo and texture patches as far OOD.

Everything comes from files that ship inside installed packages (no download):

* **ID**: scikit-learn's digits ``0 .. n_id_classes - 1`` (default 0-5), split per class with a seed
  into a training part (the small CNN trains on it and detectors fit on it; 60 %), a held-out
  validation part (detectors that fit on ID-val data, e.g. temperature scaling; 20 %) and a
  test part.
* **C-OOD pool**: the held-out digits (default 6-9); the C-OOD benchmark builds its severity
  levels from them. Labels are pool class ids ``digit - n_id_classes`` (0-3), named by digit
  (``class_names = ["6", ..., "9"]``), so they never collide with the ID classes.
* **Far OOD**, cut to the digits' format (8x8 grey, values stretched to the full 0-255 range
  like the digits' 0-16 scale): ``photos``: random square crops (16-48 px) of scikit-image's
  bundled photographs, box-filtered down to 8x8; ``textures``: the same from its brick, grass
  and gravel textures; ``letters``: crops of its scanned printed text, inverted to bright
  strokes on a dark ground like the digits (the nearest of the sets: strokes at digit scale);
  ``noise``: uniform pixel noise and box-blurred noise, half each.

All sets are deterministic functions of ``seed``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from oodbench.data.arrays import ArraySource
from oodbench.data.digits import DigitsSource
from oodbench.data.source import Source
from oodbench.errors import InvalidInputError, UnknownNameError

SIZE = 8
#: scikit-image images used for each far-OOD set
PHOTOS = ("astronaut", "camera", "chelsea", "coffee", "coins", "clock", "moon", "rocket")
TEXTURES = ("brick", "grass", "gravel")
TEXT = ("text", "page")
#: far/near kind of each non-digit set
KINDS = {"letters": "near", "photos": "far", "textures": "far", "noise": "far"}
#: every source name ``DemoData.source`` knows
SOURCES = ("id_fit", "id_val", "id_test", "pool", *KINDS)


@dataclass(frozen=True)
class DemoData:
    """The demo's sources and the training arrays of the ID classes."""

    id_fit: Source
    id_val: Source
    id_test: Source
    pool: Source
    ood: Mapping[str, Source]
    kinds: Mapping[str, str]
    train_images: np.ndarray  # (N, 8, 8) uint8: the pixels of ``id_fit``
    train_labels: np.ndarray  # (N,) int64
    id_classes: tuple[int, ...]
    ood_classes: tuple[int, ...]

    def source(self, name: str) -> Source:
        """A source by name: ``id_fit``, ``id_val``, ``id_test``, ``pool`` or a set of ``ood``."""
        sources = {"id_fit": self.id_fit, "id_val": self.id_val, "id_test": self.id_test,
                   "pool": self.pool, **self.ood}
        if name not in sources:
            raise UnknownNameError("demo source", name, sources)
        return sources[name]


def _grey(image: np.ndarray) -> np.ndarray:
    arr = np.asarray(image)
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    if arr.ndim == 3:
        arr = np.asarray(Image.fromarray(arr[..., :3]).convert("L"))
    return arr.astype(np.float32)


def _stretch(patch: np.ndarray) -> np.ndarray:
    """Min-max to [0, 255] (a flat patch becomes 0), as uint8."""
    lo, hi = float(patch.min()), float(patch.max())
    scaled = (patch - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(patch)
    return np.rint(scaled).astype(np.uint8)


def patches(
    images: Sequence[np.ndarray], n: int, *, seed: int, sizes: tuple[int, int] = (16, 48),
    invert: bool = False,
) -> np.ndarray:
    """``n`` random square crops of ``images`` box-filtered to 8x8 grey, stretched to 0-255."""
    if n < 1:
        raise InvalidInputError(f"need at least one patch, got n={n}")
    rng = np.random.default_rng(seed)
    greys = [_grey(im) for im in images]
    out = np.empty((n, SIZE, SIZE), dtype=np.uint8)
    for i in range(n):
        grey = greys[rng.integers(len(greys))]
        side = int(rng.integers(sizes[0], min(sizes[1], *grey.shape) + 1))
        top = int(rng.integers(grey.shape[0] - side + 1))
        left = int(rng.integers(grey.shape[1] - side + 1))
        crop = Image.fromarray(grey[top : top + side, left : left + side])
        small = np.asarray(crop.resize((SIZE, SIZE), Image.Resampling.BOX), dtype=np.float32)
        out[i] = _stretch(255.0 - small if invert else small)
    return out


def noise(n: int, *, seed: int) -> np.ndarray:
    """``n`` 8x8 noise images: the first half uniform, the rest 3x3 box-blurred, stretched."""
    rng = np.random.default_rng(seed)
    raw = rng.random((n, SIZE + 2, SIZE + 2), dtype=np.float32)
    half = n // 2
    out = np.empty((n, SIZE, SIZE), dtype=np.uint8)
    out[:half] = np.rint(raw[:half, 1:-1, 1:-1] * 255.0).astype(np.uint8)
    for i in range(half, n):
        window = np.lib.stride_tricks.sliding_window_view(raw[i], (3, 3))
        out[i] = _stretch(window.mean(axis=(2, 3)))
    return out


def _skimage(names: Sequence[str]) -> list[np.ndarray]:
    import skimage.data

    return [getattr(skimage.data, name)() for name in names]


@functools.lru_cache(maxsize=4)
def demo_data(
    *,
    n_id_classes: int = 6,
    fit_fraction: float = 0.6,
    val_fraction: float = 0.2,
    n_ood: int = 300,
    seed: int = 0,
) -> DemoData:
    """Build every demo set (cached per arguments; the sources are immutable)."""
    if not 0.0 < fit_fraction < 1.0:
        raise InvalidInputError(f"fit_fraction must lie in (0, 1); got {fit_fraction}")
    if not 0.0 < val_fraction < 1.0 - fit_fraction:
        raise InvalidInputError(
            f"val_fraction must lie in (0, 1 - fit_fraction) so that test images remain; got "
            f"{val_fraction} with fit_fraction {fit_fraction}"
        )
    if not 2 <= n_id_classes <= 9:
        raise InvalidInputError(
            f"n_id_classes must lie in [2, 9] (digits 0..n-1 are ID, the rest OOD); got {n_id_classes}"
        )
    id_set = list(range(n_id_classes))
    ood_classes = tuple(range(n_id_classes, 10))
    digits = DigitsSource(id_set)
    rng = np.random.default_rng(seed)
    labels = digits.labels
    part = np.full(len(digits), 2, dtype=np.int8)  # 0 fit, 1 val, 2 test
    for c in id_set:  # a seeded per-class split
        members = rng.permutation(np.flatnonzero(labels == c))
        n_fit = int(round(fit_fraction * members.size))
        n_val = int(round(val_fraction * members.size))
        part[members[:n_fit]], part[members[n_fit : n_fit + n_val]] = 0, 1
    fit_idx, val_idx, test_idx = (np.flatnonzero(part == p) for p in range(3))
    makers: dict[str, Callable[[int], np.ndarray]] = {
        "letters": lambda s: patches(_skimage(TEXT), n_ood, seed=s, sizes=(20, 40), invert=True),
        "photos": lambda s: patches(_skimage(PHOTOS), n_ood, seed=s),
        "textures": lambda s: patches(_skimage(TEXTURES), n_ood, seed=s),
        "noise": lambda s: noise(n_ood, seed=s),
    }
    ood = {
        name: ArraySource(make(seed + 1 + i), np.full(n_ood, -1), name=name)
        for i, (name, make) in enumerate(makers.items())
    }
    id_fit, id_val, id_test = digits.subset(fit_idx), digits.subset(val_idx), digits.subset(test_idx)
    id_fit.name, id_val.name, id_test.name = "digits-id-fit", "digits-id-val", "digits-id-test"
    held_out = DigitsSource(ood_classes)
    pool = ArraySource(held_out.images, held_out.labels - n_id_classes, name="digits-held-out",
                       class_names=[str(c) for c in ood_classes], ids=held_out.ids)
    return DemoData(
        id_fit=id_fit,
        id_val=id_val,
        id_test=id_test,
        pool=pool,
        ood=ood,
        kinds=dict(KINDS),
        train_images=digits.images[fit_idx, :, :, 0].copy(),
        train_labels=np.asarray(labels[fit_idx], dtype=np.int64),
        id_classes=tuple(id_set),
        ood_classes=ood_classes,
    )
