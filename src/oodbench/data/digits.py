"""``DigitsSource``: scikit-learn's bundled handwritten digits, the offline demo dataset.

``sklearn.datasets.load_digits()`` ships with scikit-learn (no download): 1,797 grey 8x8
images with values 0..16, ten classes. Holding out some digits gives a real, tiny class-OOD
problem (train on 0-4, treat 5-9 as OOD).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from PIL import Image

from oodbench.data.arrays import ArraySource
from oodbench.errors import InvalidInputError

#: class names of the digits: ``class_names[label] == str(label)``
DIGIT_NAMES = [str(d) for d in range(10)]


class DigitsSource(ArraySource):
    """The scikit-learn digits as RGB PIL images.

    Args:
        classes: keep only these digits (in the original order of the dataset). Labels stay
            the digit values, not re-indexed: ``DigitsSource([5, 7])`` has labels 5 and 7 and
            ``class_names`` is always ``["0", ..., "9"]``.
        size: if given, images are upscaled to ``size x size`` with nearest-neighbour
            resampling (pixel blocks stay exact); otherwise they are 8x8.

    Pixels are ``round(v * 255 / 16)`` of sklearn's 0..16 values, grey repeated to RGB. ids are
    ``"digits:<index in load_digits()>"``, so a sample keeps its id under any class filter.
    """

    def __init__(self, classes: Iterable[int] | None = None, *, size: int | None = None):
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)
        targets = digits.target.astype(np.int64)
        keep = np.arange(len(targets))
        if classes is not None:
            wanted = sorted({int(c) for c in classes})
            if not wanted or wanted[0] < 0 or wanted[-1] > 9:
                raise InvalidInputError(
                    f"DigitsSource classes must be a non-empty subset of 0..9; got {wanted}"
                )
            keep = np.flatnonzero(np.isin(targets, wanted))
        if size is not None:
            if size < 1:
                raise InvalidInputError(f"DigitsSource size must be a positive int; got {size}")
            images = np.stack(
                [
                    np.asarray(Image.fromarray(img).resize((size, size), Image.Resampling.NEAREST))
                    for img in images[keep]
                ]
            )
        else:
            images = images[keep]
        super().__init__(
            images,
            targets[keep],
            name="digits",
            class_names=DIGIT_NAMES,
            ids=[f"digits:{i}" for i in keep],
        )
        self.classes = sorted({int(t) for t in targets[keep]})
        self.size = size
