"""The C-OOD severity benchmark of Galil, Dabbah & El-Yaniv.

"A framework for benchmarking class-out-of-distribution detection and its application to
ImageNet", ICLR 2023 (arXiv 2302.11893); reference code github.com/mdabbah/COOD_benchmarking.

For one model and one confidence function kappa (any detector of the library), the benchmark
builds OOD test sets of graded *severity* from a pool of classes the model never saw:

1. Split each pool class's images, seeded and per class, into estimation images (75 %; the
   paper: 150 of 200) and test images (25 %; 50 of 200).
2. Severity of a pool class = mean kappa of the model on its estimation images
   (higher confidence on an OOD class = harder to detect).
3. Sort the classes by severity (ascending), take every window of ``window`` consecutive classes
   (the paper: 1000, the number of ID classes), score each window by its mean severity.
4. Level i uses the window starting at ``int(q_i * n_windows)`` for ``q = linspace(0, 1,
   n_levels)``, the last start moved back by one so it stays in range (the paper's code).
   Level 0 is the easiest window, level ``n_levels - 1`` the hardest.
5. Each level's test images are the OOD set against the ID test set: AUROC, FPR@95 (both
   conventions), AUPR-In/Out, mean kappa, ID accuracy and ID-AUROC.

Levels depend on (model, kappa) by design: every detector gets its own levels.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from oodbench.benchmarks.base import (
    Benchmark,
    BenchmarkResult,
    GroupScores,
    capture_for,
    detector_list,
    ensure_fitted,
    hyperparams_json,
    id_correctness,
    scores_key,
    skipped_images,
)
from oodbench.benchmarks.severity import (
    SELECTIONS,
    SeverityLevels,
    group_labels,
    per_class_mean,
    severity_levels,
    severity_windows,
    split_per_class,
    validate_levels,
)
from oodbench.data.source import RelabeledSource, Source
from oodbench.detectors.base import Detector
from oodbench.errors import (
    ClassCountMismatchError,
    EmptyInputError,
    InvalidInputError,
    UnknownNameError,
)
from oodbench.extract.activations import Activations

__all__ = ["SELECTIONS", "CoodBenchmark", "SeverityLevels", "group_labels", "per_class_mean",
           "severity_levels", "severity_windows", "split_per_class"]

#: pool rows scored at a time: the pool (2M rows at the paper's scale) is read block by block
#: from its memory-mapped cache files, so memory does not grow with it
POOL_BLOCK = 32_768


# -- the benchmark -------------------------------------------------------------------------------
class _OodView(RelabeledSource):
    """A pool source seen as OOD by the model: same images, every label -1.

    Pool labels are pool class ids (e.g. ImageNet-21k indices), not the model's classes, so the
    extraction engine gets label -1; the benchmark keeps the real labels itself.
    """

    def __init__(self, parent: Source):
        super().__init__(parent, np.full(len(parent), -1, dtype=np.int64))

    def fingerprint(self) -> str:  # unchanged since before RelabeledSource: cache keys stay
        return hashlib.sha256(f"ood-view:{self.parent.fingerprint()}".encode()).hexdigest()


def _class_names(data: Source | Activations) -> list[str] | None:
    """Names of the label indices of a source or of activations, when known."""
    if isinstance(data, Source):
        return None if data.class_names is None else list(data.class_names)
    names = data.meta.get("class_names")
    if names is None and data.source is not None and data.source.class_names is not None:
        names = list(data.source.class_names)
    return None if names is None else list(names)


class CoodBenchmark(Benchmark):
    """The C-OOD severity benchmark (Galil et al., ICLR 2023) for any model and detector.

    Args:
        id_test: the ID test set, a ``Source`` or its ``Activations``.
        ood_pool: the OOD class pool (labels = pool class ids, any integers >= 0), a ``Source``
            or its ``Activations``; e.g. the ImageNet-21k pool of ``oodbench cood-pool build``.
        window: classes per severity level; default the number of ID classes (the paper: 1000).
        n_levels: severity levels (the paper: 11).
        estimation_fraction: share of each pool class's images used to estimate its severity
            (the paper: 150 of 200 = 0.75); the rest are that class's test images.
        images_per_class: sample this many images per pool class first (``None``: all).
        seed: seeds the per-class sampling and split.
        selection: ``"percentiles"`` (the paper) or ``"disjoint"`` (see ``severity_windows``).
        id_classes: treat only these model classes as ID: logits (and head rows) of both sets
            are restricted to them (``Activations.restrict_classes``) and ID labels re-indexed;
            detectors are fitted only on the rows of ``fit_activations`` / ``id_val`` whose label
            is one of them (the other classes are OOD at test time, so a bank or a statistic
            that saw them would leak), and the rows' ``fit_data`` says so. The fit activations
            must carry class labels then.

    After ``run``: ``levels_[detector name]`` holds each level's pool class labels,
    ``severity_[detector name]`` the ``SeverityLevels`` (window indices refer to
    ``pool_classes_``) and ``level_classes(...)`` returns them by detector and level;
    ``id_activations_`` are the ID activations the run scored (restricted to ``id_classes``),
    ``pool_activations_`` the pool's (memory-mapped, not restricted: the pool is scored
    ``POOL_BLOCK`` rows at a time, each block restricted on the fly) and ``pool_positions_``
    the pool position of each row of ``pool_activations_`` (a Source pool is extracted only at
    the sampled positions ``used_idx_``; skipped images have no row).
    """

    name = "cood"

    def __init__(
        self,
        id_test: Source | Activations,
        ood_pool: Source | Activations,
        *,
        window: int | None = None,
        n_levels: int = 11,
        estimation_fraction: float = 0.75,
        images_per_class: int | None = None,
        seed: int = 0,
        selection: str = "percentiles",
        id_classes: Sequence[int] | np.ndarray | None = None,
    ):
        for label, value in (("id_test", id_test), ("ood_pool", ood_pool)):
            if not isinstance(value, (Source, Activations)):
                raise InvalidInputError(
                    f"CoodBenchmark {label} must be a Source or Activations; got "
                    f"{type(value).__name__}"
                )
        if selection not in SELECTIONS:
            raise InvalidInputError(f"selection must be one of {SELECTIONS}; got {selection!r}")
        if window is not None and (isinstance(window, bool) or window < 1):
            raise InvalidInputError(f"window must be a positive integer or None; got {window!r}")
        self.id_test, self.ood_pool = id_test, ood_pool
        self.window, self.n_levels, self.selection = window, n_levels, selection
        self.estimation_fraction, self.images_per_class = estimation_fraction, images_per_class
        self.seed = seed
        self.id_classes = None if id_classes is None else np.asarray(id_classes, dtype=np.int64)
        if self.id_classes is not None and (
            self.id_classes.ndim != 1
            or self.id_classes.size == 0
            or np.unique(self.id_classes).size != self.id_classes.size
        ):
            raise InvalidInputError("id_classes must be a non-empty list of distinct class indices")

        pool_labels = np.asarray(ood_pool.labels, dtype=np.int64)
        if pool_labels.size == 0:
            raise EmptyInputError(f"the OOD pool {self._describe(ood_pool)} has no samples")
        if (pool_labels < 0).any():
            raise InvalidInputError(
                f"the OOD pool {self._describe(ood_pool)} has {int((pool_labels < 0).sum())} "
                "samples with label -1: C-OOD needs the class of every pool image (labels = pool "
                "class ids); write the pool list with `oodbench cood-pool build`"
            )
        self.pool_labels_ = pool_labels
        est, test, dropped = split_per_class(
            pool_labels,
            estimation_fraction=estimation_fraction,
            images_per_class=images_per_class,
            seed=seed,
        )
        if dropped.size:
            warnings.warn(
                f"C-OOD: dropped {dropped.size} pool classes with fewer than "
                f"{images_per_class or 2} images (first: {dropped[:10].tolist()})",
                stacklevel=2,
            )
        if est.size == 0:
            raise EmptyInputError(
                "the OOD pool has no class with enough images to split into estimation and test"
            )
        #: pool positions (rows of the pool source / activations) of estimation and test images
        self.estimation_idx_, self.test_idx_, self.dropped_classes_ = est, test, dropped
        #: the pool positions that are used (a Source pool extracts only these images)
        self.used_idx_ = np.union1d(est, test)
        #: the pool classes that take part, sorted (severity windows index into this)
        self.pool_classes_ = np.unique(pool_labels[est])
        self._check_disjoint_classes()
        if window is not None:  # fail before any forward pass
            validate_levels(self.pool_classes_.size, window, n_levels, selection)
        self.levels_: dict[str, list[np.ndarray]] = {}
        self.severity_: dict[str, SeverityLevels] = {}
        self._levels_by_config: dict[tuple[str, str], list[np.ndarray]] = {}

    # -- public --------------------------------------------------------------------------------
    def check_model(self, num_classes: int) -> None:
        """Raise before any forward pass when a model with ``num_classes`` outputs cannot run
        this benchmark: ``id_classes`` beyond its classes, or a default window (the number of
        ID classes) that the pool's classes cannot fill."""
        if self.id_classes is not None and (
            self.id_classes.min() < 0 or self.id_classes.max() >= num_classes
        ):
            raise ClassCountMismatchError(
                f"id_classes refer to classes up to {int(self.id_classes.max())} but the model "
                f"predicts {num_classes} classes"
            )
        if self.window is not None:
            return  # checked when the benchmark was built
        window = num_classes if self.id_classes is None else int(self.id_classes.size)
        try:
            validate_levels(self.pool_classes_.size, window, self.n_levels, self.selection)
        except InvalidInputError as err:
            raise InvalidInputError(
                f"the default window is the number of ID classes, {window}: {err}. Set window "
                "(classes per severity level) explicitly, or use a pool with more classes"
            ) from None

    def measure(
        self,
        model: Any,
        detectors: Sequence[Detector],
        *,
        fit_activations: Activations | None = None,
        id_val: Activations | None = None,
        **extract_options: Any,
    ) -> BenchmarkResult:
        """Build each detector's severity levels and evaluate them; one row per detector x level."""
        from oodbench.metrics import evaluate

        detectors = detector_list(detectors, "CoodBenchmark")
        num_classes = self._num_classes(model)
        if num_classes is not None:  # fail before any forward pass, as the experiment runner
            self.check_model(num_classes)
        if self.id_classes is not None:
            live = [d.name for d in detectors if "model" in d.requires]
            if live:
                raise InvalidInputError(
                    f"detectors {live} run the live network over all of its classes, which "
                    "id_classes= cannot restrict; run them without id_classes"
                )
            fit_activations = self._id_class_rows(fit_activations, "fit_activations")
            id_val = self._id_class_rows(id_val, "id_val")
        id_acts, pool_acts = self._activations(model, detectors, extract_options)
        self.id_activations_, self.pool_activations_ = id_acts, pool_acts
        skipped = skipped_images(id_acts, pool_acts)
        ensure_fitted(detectors, fit_activations, model, id_val)
        pool_kappas = self._score_pool(detectors, pool_acts)
        id_correct = id_correctness(id_acts)
        window = self.window if self.window is not None else id_acts.num_classes

        # pool rows of the activations -> pool positions (rows of skipped images are absent)
        if isinstance(self.ood_pool, Source):
            positions = self.used_idx_[np.asarray(pool_acts.source_indices, dtype=np.int64)]
        else:
            positions = np.arange(len(pool_acts))
        self.pool_positions_ = positions
        role = np.full(self.pool_labels_.size, -1, dtype=np.int8)
        role[self.estimation_idx_], role[self.test_idx_] = 0, 1
        row_role = role[positions]
        row_class = np.searchsorted(self.pool_classes_, self.pool_labels_[positions])
        est_rows, test_rows = np.flatnonzero(row_role == 0), np.flatnonzero(row_role == 1)

        rows = []
        scores: dict[tuple[str, str], GroupScores] = {}
        for det, pool_kappa in zip(detectors, pool_kappas):
            id_kappa = det.score(id_acts)
            present, means, _ = per_class_mean(pool_kappa[est_rows], row_class[est_rows])
            sev = severity_windows(
                means, window=window, n_levels=self.n_levels, selection=self.selection
            )
            level_classes = [present[c] for c in sev.classes]  # indices into pool_classes_
            self.severity_[det.name] = sev
            self.levels_[det.name] = [self.pool_classes_[c] for c in level_classes]
            self._levels_by_config[(det.name, hyperparams_json(det))] = self.levels_[det.name]
            test_class, test_kappa = row_class[test_rows], pool_kappa[test_rows]
            level_scores: dict[str, np.ndarray] = {}
            for level, classes in enumerate(level_classes):
                member = np.zeros(self.pool_classes_.size, dtype=bool)
                member[classes] = True
                ood_kappa = test_kappa[member[test_class]]
                if ood_kappa.size == 0:
                    raise EmptyInputError(
                        f"C-OOD level {level} of detector {det.name!r} has no test images "
                        "(every image of its classes was skipped or used for estimation)"
                    )
                level_scores[f"level_{level}"] = ood_kappa
                metrics = evaluate(id_kappa, ood_kappa, id_correct=id_correct,
                                   **self.interval_options())
                rows.append(
                    {
                        "detector": det.name,
                        "hyperparams": hyperparams_json(det),
                        "group": f"level_{level}",
                        "level": level,
                        "severity": float(sev.scores[level]),
                        "percentile": float(sev.percentiles[level]),
                        "n_id": int(id_kappa.size),
                        "n_ood": int(ood_kappa.size),
                        "n_classes": int(classes.size),
                        "n_levels": len(level_classes),
                        "n_pool_classes": int(self.pool_classes_.size),
                        **{k: float(v) for k, v in metrics.items()},
                        "id_mean_kappa": float(id_kappa.mean()),
                        "ood_mean_kappa": float(ood_kappa.mean()),
                        **self._provenance(det),
                    }
                )
            scores[scores_key(det)] = (id_kappa, level_scores)
        return BenchmarkResult(pd.DataFrame(rows), scores, skipped)

    def level_classes(
        self, detector: str | Detector, level: int | None = None, *, names: bool = False
    ) -> list[np.ndarray] | np.ndarray | list[list[str]] | list[str]:
        """The pool class labels (or, with ``names=True``, class names) of a detector's levels.

        ``detector``: a name (the last run of that name) or a ``Detector`` (its exact
        hyper-parameters). ``level=None`` returns every level (level 0 first).
        """
        if isinstance(detector, Detector):
            config = (detector.name, hyperparams_json(detector))
            if config not in self._levels_by_config:
                raise InvalidInputError(
                    f"detector {detector.name!r} with hyper-parameters {config[1]} has not been "
                    "run on this benchmark; call run(model, [detector]) first"
                )
            levels = self._levels_by_config[config]
        elif detector in self.levels_:
            levels = self.levels_[detector]
        else:
            raise UnknownNameError(
                "detector (run the benchmark with it first)", detector, self.levels_
            )
        if level is not None and not 0 <= level < len(levels):
            raise InvalidInputError(f"level must lie in [0, {len(levels)}); got {level}")
        chosen = levels if level is None else [levels[level]]
        if names:
            pool_names = _class_names(self.ood_pool)
            if pool_names is None:
                raise InvalidInputError(
                    "the OOD pool carries no class names; call level_classes(..., names=False)"
                )
            named = [[pool_names[c] for c in lv] for lv in chosen]
            return named if level is None else named[0]
        return chosen if level is None else chosen[0]

    # -- internals -----------------------------------------------------------------------------
    def _id_class_rows(self, acts: Activations | None, what: str) -> Activations | None:
        """``acts`` restricted to ``id_classes``: their logits and head, and only the rows whose
        label is one of them."""
        if acts is None or self.id_classes is None:
            return acts
        if not (np.asarray(acts.labels) >= 0).any():
            raise InvalidInputError(
                f"id_classes treats only some classes as ID, but {what} carry no class labels "
                "(every label is -1), so the rows of the other classes cannot be left out of the "
                f"fit; pass labelled {what} (the ID training / validation images with their classes)"
            )
        restricted = acts.restrict_classes(self.id_classes)
        rows = np.flatnonzero(np.asarray(restricted.labels) >= 0)
        if rows.size == 0:
            raise EmptyInputError(f"{what} have no row of the id_classes {self.id_classes.tolist()}")
        return restricted.subset(rows)

    def _provenance(self, det: Detector) -> dict[str, str]:
        """``det.provenance()``, with ``fit_data`` marking a fit on the id_classes rows only."""
        out = det.provenance()
        if self.id_classes is not None and det.fits_on_data:
            out["fit_data"] += " (id_classes rows)"
        return out

    def _score_pool(self, detectors: Sequence[Detector], pool: Activations) -> list[np.ndarray]:
        """kappa of every detector on every pool row, ``POOL_BLOCK`` rows at a time.

        Each block is a view of the (memory-mapped) pool, restricted to ``id_classes`` on the
        fly and scored by every detector before the next is read; its file pages are then
        dropped from the resident set (``Activations.release_pages``). Memory holds one block
        and one float64 score per pool row and detector, whatever the pool's size.
        """
        scores = [np.empty(len(pool), dtype=np.float64) for _ in detectors]
        for start in range(0, len(pool), POOL_BLOCK):
            rows = slice(start, min(start + POOL_BLOCK, len(pool)))
            block = pool.rows(rows)
            scored = block if self.id_classes is None else block.restrict_classes(self.id_classes)
            for det, out in zip(detectors, scores):
                out[rows] = det.score(scored)
            block.release_pages()
        return scores

    def _num_classes(self, model: Any) -> int | None:
        """The model's class count, known before extraction (from the model, or from ID
        activations when no model is given); ``None`` when neither tells."""
        count = getattr(model, "num_classes", None)
        if isinstance(count, (int, np.integer)) and not isinstance(count, bool):
            return int(count)
        if isinstance(self.id_test, Activations):
            return self.id_test.num_classes
        return None

    @staticmethod
    def _describe(data: Source | Activations) -> str:
        if isinstance(data, Source):
            return repr(data.name)
        return f"activations of {data.meta.get('source', data.meta.get('model', '?'))!r}"

    def _id_class_names(self) -> set[str] | None:
        names = _class_names(self.id_test)
        if names is None:
            return None
        if self.id_classes is not None:
            return {names[c] for c in self.id_classes if 0 <= c < len(names)}
        restricted = (
            self.id_test.meta.get("restricted_classes")
            if isinstance(self.id_test, Activations)
            else None
        )
        if restricted is not None:
            return {names[c] for c in restricted}
        labels = np.unique(np.asarray(self.id_test.labels))
        return {names[c] for c in labels[(labels >= 0) & (labels < len(names))]}

    def _check_disjoint_classes(self) -> None:
        """No pool class may be an ID class (checked by name when both sides carry names)."""
        id_names = self._id_class_names()
        pool_names = _class_names(self.ood_pool)
        if id_names is None or pool_names is None:
            return
        used = {pool_names[c] for c in self.pool_classes_ if c < len(pool_names)}
        overlap = sorted(used & id_names)
        if overlap:
            raise InvalidInputError(
                f"{len(overlap)} OOD pool classes are also ID classes: "
                f"{', '.join(overlap[:20])}{' ...' if len(overlap) > 20 else ''}. Remove them "
                "from the pool (or from id_classes); a class the model was trained on is not OOD"
            )

    def _activations(
        self, model: Any, detectors: Sequence[Detector], extract_options: dict[str, Any]
    ) -> tuple[Activations, Activations]:
        """The ID and pool activations (extracted once through the cache when given Sources)."""
        options = {"capture": capture_for(detectors), **extract_options}

        def get(data: Source | Activations) -> Activations:
            if isinstance(data, Activations):
                return data
            if model is None:
                raise InvalidInputError(
                    "CoodBenchmark.run(model=None) needs Activations, not Sources; pass a model"
                )
            from oodbench.extract import extract

            return extract(model, data, **options)

        pool = self.ood_pool
        if isinstance(pool, Source):  # only the sampled images, seen as OOD (label -1)
            pool = _OodView(pool).subset(self.used_idx_)
        id_acts, pool_acts = get(self.id_test), get(pool)
        if self.id_classes is not None:
            if self.id_classes.max() >= id_acts.num_classes or self.id_classes.min() < 0:
                raise ClassCountMismatchError(
                    f"id_classes refer to classes up to {int(self.id_classes.max())} but the "
                    f"model predicts {id_acts.num_classes} classes"
                )
            id_acts = id_acts.restrict_classes(self.id_classes)  # the pool: block by block
        id_labels = np.asarray(id_acts.labels)
        if len(id_acts) == 0:
            raise EmptyInputError("the ID test set has no samples")
        if id_labels.max() >= id_acts.num_classes:
            raise ClassCountMismatchError(
                f"ID labels go up to {int(id_labels.max())} but the model predicts "
                f"{id_acts.num_classes} classes; pass id_classes= to treat a subset as ID"
            )
        if (id_labels < 0).any() and not (id_labels < 0).all():
            raise InvalidInputError(
                f"{int((id_labels < 0).sum())} of {id_labels.size} ID test samples have no ID "
                "class (label -1, or a class outside id_classes); remove them from the ID set"
            )
        return id_acts, pool_acts
