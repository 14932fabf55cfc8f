"""The ``Source`` contract: an ordered, labelled collection of images with a stable fingerprint.

Every dataset reader (image folder, image list, tar shards, in-memory arrays, the bundled digits)
is a ``Source``. The extraction engine only ever uses this interface, so a new reader needs
nothing else to work with the cache, the detectors and the benchmarks.

Labels are integers; ``-1`` means "no ID class" (an OOD sample, as in OpenOOD's image lists).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
from PIL import Image


class Source(ABC):
    """An ordered collection of ``(image, label)`` pairs.

    Subclasses implement ``__len__``, ``load``, ``labels``, ``ids`` and ``fingerprint``.
    ``load(i)`` returns a PIL image (RGB) and raises :class:`oodbench.errors.CorruptImageError`
    for a file that cannot be decoded; the extraction engine skips, counts and reports those.
    """

    #: a short human-readable name used in logs, results tables and error messages
    name: str = "source"
    #: names of the label indices, when known (``class_names[label]``)
    class_names: Sequence[str] | None = None

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def load(self, index: int) -> Image.Image:
        """The image at ``index`` as an RGB PIL image (raises ``CorruptImageError``)."""

    @property
    @abstractmethod
    def labels(self) -> np.ndarray:
        """int64 array of length ``len(self)``; -1 where the sample has no ID class."""

    @property
    @abstractmethod
    def ids(self) -> list[str]:
        """One stable identifier per sample (a relative path, or ``"<name>:<index>"``)."""

    @abstractmethod
    def fingerprint(self) -> str:
        """A hex digest that changes whenever any image, label or the order changes."""

    def subset(self, indices: Sequence[int] | np.ndarray) -> Source:
        """A view of the samples at ``indices`` (in that order)."""
        return SubsetSource(self, np.asarray(indices, dtype=np.int64))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, n={len(self)})"


class SubsetSource(Source):
    """The samples of ``parent`` at ``indices``; fingerprint = parent's + the index list."""

    def __init__(self, parent: Source, indices: np.ndarray):
        n = len(parent)
        if indices.size and (indices.min() < -n or indices.max() >= n):
            from oodbench.errors import InvalidInputError

            raise InvalidInputError(
                f"subset of source {parent.name!r}: indices must lie in [0, {n}); "
                f"got min {indices.min()}, max {indices.max()}"
            )
        self.parent = parent
        self.indices = indices % max(n, 1)
        self.name = parent.name
        self.class_names = parent.class_names

    def __len__(self) -> int:
        return int(self.indices.size)

    def load(self, index: int) -> Image.Image:
        return self.parent.load(int(self.indices[index]))

    @property
    def labels(self) -> np.ndarray:
        return self.parent.labels[self.indices]

    @property
    def ids(self) -> list[str]:
        parent_ids = self.parent.ids
        return [parent_ids[i] for i in self.indices]

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.parent.fingerprint().encode())
        h.update(self.indices.astype("<i8").tobytes())
        return h.hexdigest()


class SourceView(Source):
    """Another view of ``parent``'s images: the same images and ids, in the same order.

    Subclasses give ``labels`` and ``fingerprint`` (which must differ from the parent's when the
    labels do) and may set ``class_names``. A file source's ``path(index)`` is kept (skipped-image
    records name the file).
    """

    def __init__(self, parent: Source):
        self.parent = parent
        self.name = parent.name
        path = getattr(parent, "path", None)
        if callable(path):
            self.path = path

    def __len__(self) -> int:
        return len(self.parent)

    def load(self, index: int) -> Image.Image:
        return self.parent.load(index)

    @property
    def ids(self) -> list[str]:
        return self.parent.ids


class RelabeledSource(SourceView):
    """The images of ``parent`` with other labels, one per image (e.g. re-indexed to a subset of
    classes, or mapped onto a model's class indices); fingerprint = parent's + the new labels.

    ``class_names`` name the new label indices (``None`` when unknown).
    """

    def __init__(self, parent: Source, labels: np.ndarray, class_names: Sequence[str] | None = None):
        labels = np.asarray(labels, dtype=np.int64)
        if labels.shape != (len(parent),):
            from oodbench.errors import InvalidInputError

            raise InvalidInputError(
                f"RelabeledSource of {parent.name!r}: {labels.shape[0] if labels.ndim else 0} "
                f"labels for {len(parent)} images; give one label per image"
            )
        super().__init__(parent)
        labels.setflags(write=False)
        self._labels = labels
        self.class_names = None if class_names is None else list(class_names)

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.parent.fingerprint().encode())
        h.update(self._labels.astype("<i8").tobytes())
        return h.hexdigest()
