"""``Activations``: what one forward pass of a classifier over a source produced.

Everything downstream (detectors, benchmarks) reads these arrays; only detectors that need the
live network (ODIN, MC-dropout) go back to ``source`` through ``source_indices``.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from oodbench.data.source import Source
from oodbench.errors import InvalidInputError, MissingActivationError

ARRAY_FIELDS = ("logits", "features", "feature_map", "labels", "ids", "source_indices")


@dataclass
class Activations:
    """Per-sample outputs of one model on one source (numpy arrays, possibly memory-mapped).

    Attributes:
        logits: (N, num_classes) float32.
        labels: (N,) int64 ground-truth labels; -1 where the sample has no ID class.
        ids: (N,) sample identifiers (relative paths or ``"<source>:<index>"``).
        features: (N, D) penultimate features, or ``None`` when not captured.
        feature_map: (N, C, H, W) (or ViT tokens (N, T, D)), or ``None``.
        head_weight, head_bias: the linear head (num_classes, D) and (num_classes,), or ``None``.
        source: the source the rows came from (for detectors that need the live model).
        source_indices: (N,) position of each row in ``source`` (rows of skipped images are absent).
        meta: provenance: model spec, weights digest, source fingerprint, cache key, skipped files.
    """

    logits: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    features: np.ndarray | None = None
    feature_map: np.ndarray | None = None
    head_weight: np.ndarray | None = None
    head_bias: np.ndarray | None = None
    source: Source | None = None
    source_indices: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.logits)
        if np.ndim(self.logits) != 2:
            raise InvalidInputError(
                f"Activations.logits must be 2-D (samples, classes); got shape {np.shape(self.logits)}"
            )
        for name in ARRAY_FIELDS:
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise InvalidInputError(
                    f"Activations.{name} has {len(value)} rows but logits has {n}; "
                    "every per-sample array needs one row per sample"
                )
        if self.source_indices is None:
            self.source_indices = np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.logits)

    @property
    def num_classes(self) -> int:
        return int(self.logits.shape[1])

    @property
    def predictions(self) -> np.ndarray:
        """Top-1 predicted class per sample (argmax of the logits)."""
        return np.asarray(self.logits).argmax(axis=1)

    @property
    def correct(self) -> np.ndarray:
        """Whether the top-1 prediction equals the label (False where the label is -1)."""
        return self.predictions == np.asarray(self.labels)

    def require(self, *names: str, who: str = "this detector") -> None:
        """Raise ``MissingActivationError`` naming the fix if any of ``names`` was not captured."""
        missing = [n for n in names if getattr(self, n, None) is None]
        if missing:
            raise MissingActivationError(
                f"{who} needs {', '.join(missing)}, which these activations do not hold "
                f"(model {self.meta.get('model', '?')!r}). Extract with "
                f"capture={tuple(sorted({'logits', *names} - {'head_weight', 'head_bias'}))!r}"
                + ("; head weights come from a model with a linear head" if
                   {"head_weight", "head_bias"} & set(missing) else "")
            )

    def subset(self, index: np.ndarray | Sequence[int]) -> Activations:
        """The rows at ``index`` (an integer array or a boolean mask); head and source are kept."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)

        def take(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.asarray(a[idx])

        return replace(
            self,
            logits=np.asarray(self.logits[idx]),
            labels=np.asarray(self.labels[idx]),
            ids=np.asarray(self.ids[idx]),
            features=take(self.features),
            feature_map=take(self.feature_map),
            source_indices=take(self.source_indices),
            meta=dict(self.meta),
        )

    def rows(self, rows: slice) -> Activations:
        """The rows in ``rows`` (a slice) as views: memory-mapped arrays stay memory-mapped, nothing
        is copied (unlike ``subset``, whose index arrays copy). Head and source are kept."""
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise InvalidInputError(f"Activations.rows takes a slice with step 1; got {rows!r}")

        def view(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[rows]

        return replace(
            self,
            logits=self.logits[rows],
            labels=self.labels[rows],
            ids=self.ids[rows],
            features=view(self.features),
            feature_map=view(self.feature_map),
            source_indices=view(self.source_indices),
            meta=dict(self.meta),
        )

    def release_pages(self) -> None:
        """Drop the pages of memory-mapped (read-only) arrays that this process has touched from
        its resident set (``madvise(MADV_DONTNEED)``; they stay in the OS page cache).

        Streaming over a cache entry larger than memory (the C-OOD pool) then keeps the resident
        set flat instead of growing with every file page read. A no-op for in-memory arrays and
        where ``madvise`` is unavailable.
        """
        for name in ARRAY_FIELDS:
            array = getattr(self, name)
            handle = getattr(array, "_mmap", None)
            if handle is not None and getattr(array, "mode", None) == "r" and hasattr(mmap, "MADV_DONTNEED"):
                handle.madvise(mmap.MADV_DONTNEED)

    def restrict_classes(self, classes: Sequence[int] | np.ndarray) -> Activations:
        """Keep only the logits (and head rows) of ``classes``, as if the model had only those.

        Labels are re-indexed to positions in ``classes``; a label not in ``classes`` (or not a
        class of the model at all) becomes -1.
        Used to treat part of a model's classes as ID and the rest as OOD. Every row is kept:
        before fitting a detector on restricted activations, keep only the rows with a label
        (``labels >= 0``), or the statistics see the classes that are OOD at test time
        (``CoodBenchmark(id_classes=...)`` does so).
        """
        classes = np.asarray(classes, dtype=np.int64)
        lookup = np.full(self.num_classes, -1, dtype=np.int64)
        lookup[classes] = np.arange(classes.size)
        labels = np.asarray(self.labels)
        known = (labels >= 0) & (labels < self.num_classes)  # e.g. C-OOD pool class ids are not
        new_labels = np.where(known, lookup[np.clip(labels, 0, self.num_classes - 1)], -1)
        return replace(
            self,
            logits=np.asarray(self.logits)[:, classes],
            labels=new_labels,
            head_weight=None if self.head_weight is None else np.asarray(self.head_weight)[classes],
            head_bias=None if self.head_bias is None else np.asarray(self.head_bias)[classes],
            meta={**self.meta, "restricted_classes": classes.tolist()},
        )

    @classmethod
    def concatenate(cls, parts: Sequence[Activations]) -> Activations:
        """Stack the rows of several activations of the same model (head taken from the first)."""
        if not parts:
            raise InvalidInputError("Activations.concatenate needs at least one part")

        def cat(name: str) -> np.ndarray | None:
            values = [getattr(p, name) for p in parts]
            if any(v is None for v in values):
                return None
            return np.concatenate([np.asarray(v) for v in values])

        first = parts[0]
        return cls(
            logits=cat("logits"),  # type: ignore[arg-type]
            labels=cat("labels"),  # type: ignore[arg-type]
            ids=cat("ids"),  # type: ignore[arg-type]
            features=cat("features"),
            feature_map=cat("feature_map"),
            head_weight=first.head_weight,
            head_bias=first.head_bias,
            source=None,
            source_indices=None,
            meta={"parts": [p.meta for p in parts]},
        )
