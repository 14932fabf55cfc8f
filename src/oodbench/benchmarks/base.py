"""The ``Benchmark`` contract shared by the C-OOD severity benchmark and the standard ones.

A benchmark knows its ID test source and its OOD groups (C-OOD severity levels, near/far sets),
extracts what it needs once through the cache, and evaluates any number of detectors:

    table = bench.run(model, [create("msp"), create("knn")], fit_activations=train_acts,
                      id_val=val_acts)

Each detector that learns statistics is fitted on the ID data its ``fit_data`` names:
``fit_activations`` (the ID training set) or ``id_val`` (held-out ID validation data).

``run`` returns a *wide* ``pandas.DataFrame`` (``measure`` returns it with the scores behind
it and the images its extractions skipped, a :class:`BenchmarkResult`): one row per (detector, OOD group) with the columns
``detector``, ``hyperparams`` (a JSON string), ``group``, ``n_id``, ``n_ood``, every key of
``oodbench.metrics.evaluate``, the provenance columns ``preset``, ``fit_data`` and ``tuning``
(``Detector.provenance``) and any benchmark-specific columns (``severity``, ``percentile``,
``kind`` = near/far, ...). The results module turns it into the long results table.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from oodbench.data.labels import warn_if_chance_accuracy
from oodbench.detectors.base import Detector
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations

#: one detector run's scores: the ID test scores and each OOD group's scores
GroupScores = tuple[np.ndarray, dict[str, np.ndarray]]


@dataclass(frozen=True)
class BenchmarkResult:
    """What one :meth:`Benchmark.measure` produced.

    Attributes:
        rows: the wide rows (one per detector x OOD group; see the module docstring).
        scores: ``(detector name, hyperparams JSON) -> (id_scores, {group: ood_scores})``, the
            scores behind the rows (for histograms and re-analysis).
        skipped_images: the unreadable images its extractions skipped
            (:func:`skipped_images`).
    """

    rows: pd.DataFrame
    scores: dict[tuple[str, str], GroupScores] = field(default_factory=dict)
    skipped_images: dict[str, dict[str, Any]] = field(default_factory=dict)


class Benchmark(ABC):
    """An ID test set against one or more OOD groups.

    :meth:`measure` returns a :class:`BenchmarkResult` (rows, scores, skipped images);
    :meth:`run` returns its rows only. A benchmark keeps no scores between calls.
    """

    name: str = "benchmark"
    #: intervals on every row: DeLong's for AUROC (``ci``, O(n log n), on by default) and, when
    #: ``n_bootstrap > 0``, bootstrap intervals of FPR@95 and AUPR (seeded by ``seed`` when the
    #: benchmark has one); see ``oodbench.metrics.evaluate``. Set them on an instance.
    ci: bool = True
    n_bootstrap: int = 0

    def interval_options(self) -> dict[str, Any]:
        """The interval keywords ``run`` passes to ``oodbench.metrics.evaluate``."""
        return {"ci": self.ci, "n_bootstrap": self.n_bootstrap, "seed": getattr(self, "seed", 0)}

    @abstractmethod
    def measure(
        self,
        model: Any,
        detectors: Sequence[Detector],
        *,
        fit_activations: Activations | None = None,
        id_val: Activations | None = None,
        **extract_options: Any,
    ) -> BenchmarkResult:
        """Evaluate every detector on every OOD group (one wide row per detector x group);
        detectors are fitted on ``fit_activations`` or ``id_val`` as their ``fit_data`` says."""

    def run(
        self,
        model: Any,
        detectors: Sequence[Detector],
        *,
        fit_activations: Activations | None = None,
        id_val: Activations | None = None,
        **extract_options: Any,
    ) -> pd.DataFrame:
        """The rows of :meth:`measure`."""
        return self.measure(model, detectors, fit_activations=fit_activations, id_val=id_val,
                            **extract_options).rows

    def evaluate(self, model: Any, detector: Detector, **kwargs: Any) -> pd.DataFrame:
        """``run`` for a single detector."""
        return self.run(model, [detector], **kwargs)


def scores_key(det: Detector) -> tuple[str, str]:
    """The key of a detector's scores in :attr:`BenchmarkResult.scores`."""
    return det.name, hyperparams_json(det)


def detector_list(detectors: Sequence[Detector] | Detector, who: str) -> Sequence[Detector]:
    """``run``'s detectors as a sequence (one ``Detector`` is wrapped); raises when it is empty."""
    if isinstance(detectors, Detector):
        return [detectors]
    if not detectors:
        raise InvalidInputError(f"{who}.run needs at least one detector")
    return detectors


def id_correctness(id_acts: Activations) -> np.ndarray | None:
    """Per-row correctness of the ID predictions for ``evaluate(..., id_correct=)``; ``None``
    when no ID row has a class label (every label is -1). Warns (``LabelMappingWarning``) when
    the accuracy is at chance level, the sign of labels that are not the model's classes."""
    labels = np.asarray(id_acts.labels, dtype=np.int64)
    if (labels < 0).all():
        return None
    correct = id_acts.correct
    where = f"model {id_acts.meta.get('model', '?')!r} on {id_acts.meta.get('source', 'the ID set')!r}"
    warn_if_chance_accuracy(float(correct[labels >= 0].mean()), labels, where=where)
    return correct


def ensure_fitted(
    detectors: Sequence[Detector],
    fit_activations: Activations | None,
    model: Any,
    id_val: Activations | None = None,
) -> None:
    """Fit every detector that is not fitted yet, on ``fit_activations`` or ``id_val`` as its
    ``fit_data`` says (detectors fitted before are used as they are)."""
    for det in detectors:
        if getattr(det, "_fitted", False):
            continue
        if det.fits_on_data and (fit_activations if det.fit_data == "train" else id_val) is None:
            argument = (
                "fit_activations=extract(model, id_train_source)" if det.fit_data == "train"
                else "id_val=extract(model, id_val_source) (held-out ID validation images)"
            )
            raise InvalidInputError(
                f"detector {det.name!r} fits on {det.fit_data!r} data: pass {argument} to the "
                "benchmark's run"
            )
        det.fit(fit_activations, model, id_val=id_val)


def needs_role(detectors: Sequence[Detector], role: str) -> bool:
    """True when some detector that is not fitted yet fits on ``role`` data (``"id_val"``)."""
    return any(
        d.fits_on_data and d.fit_data == role and not getattr(d, "_fitted", False) for d in detectors
    )


def capture_for(detectors: Sequence[Any]) -> tuple[str, ...]:
    """What ``extract`` captures for ``detectors`` (or detector configurations: anything with
    ``requires``): logits and features always (features cost
    nothing next to the forward pass, and one cache entry then serves every later detector of
    the same model and source), plus feature maps when a detector reads them."""
    needs = {"logits", "features"}
    for det in detectors:
        needs |= set(det.requires) & {"feature_map"}
    return tuple(sorted(needs))


def skipped_images(*acts: Activations) -> dict[str, dict[str, Any]]:
    """The unreadable images behind ``acts``: source fingerprint -> ``{"source": name,
    "n_source": images in the source, "skipped": [{"index", "id", "reason", ...}]}`` for each
    extraction that skipped any (from ``meta["skipped"]``)."""
    out = {}
    for a in acts:
        if a.meta.get("skipped"):
            key = str(a.meta.get("source_fingerprint") or a.meta.get("source"))
            out[key] = {"source": a.meta.get("source"), "n_source": a.meta.get("n_source"),
                        "skipped": list(a.meta["skipped"])}
    return out


def hyperparams_json(det: Detector) -> str:
    """The detector's hyper-parameters as a canonical JSON string (sorted keys)."""
    return json.dumps(det.hyperparams, sort_keys=True, default=str)
