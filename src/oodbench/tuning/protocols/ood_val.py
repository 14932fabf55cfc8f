"""The ``ood_val`` tuning protocol (OpenOOD v1.5): score each point on ID and OOD validation sets.

A point's detector is fitted on ``fit`` (or on ``id_val``, as its ``fit_data`` says) and scored
with :func:`oodbench.metrics.evaluate` on (``id_val``, ``ood_val``). Without ``ood_val`` the
point is scored on ``id_val`` alone (the ID-only criteria of :mod:`oodbench.tuning.criteria`;
the record then says ``protocol = "id_only"``). Points that differ only in score-only
hyper-parameters share one fit (:class:`SharedFits`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from oodbench import metrics
from oodbench.errors import InvalidInputError
from oodbench.tuning.criteria import id_metrics, resolve_criterion
from oodbench.tuning.protocol import Builder, Objective, Stage, TuningData, TuningProtocol, register
from oodbench.tuning.space import split_point

if TYPE_CHECKING:
    from oodbench.detectors.base import Detector


@register
class OodValidation(TuningProtocol):
    """OpenOOD v1.5: the point with the best criterion on an OOD validation set wins."""

    name = "ood_val"
    uses_ood = True

    @classmethod
    def objective(cls, build: Builder, data: TuningData, criterion: str | None,
                  settings: Any) -> Objective:
        name, larger = resolve_criterion(criterion, with_ood=data.ood_val is not None)
        correct = np.asarray(data.id_val.correct)
        if data.ood_val is None and (correct.all() or not correct.any()):
            raise InvalidInputError(
                "tune without OOD data ranks correct against wrong ID predictions, but the model "
                f"gets {'all' if correct.all() else 'none'} of the {len(correct)} id_val samples "
                "right; use a larger labelled id_val or pass ood_val"
            )
        provenance = {} if data.ood_val is not None else {"protocol": "id_only"}
        return Objective(None, name, larger, provenance, stages=[SharedFits(build, data).stage()])


def fit_key(det: Detector) -> tuple[Any, ...]:
    """What a fit depends on: the hyper-parameters that are not score-only."""
    score_only: frozenset[str] = getattr(type(det), "score_only_hyperparams", frozenset())
    return tuple(sorted((k, repr(v)) for k, v in det.hyperparams.items() if k not in score_only))


class SharedFits:
    """point -> metrics on (``id_val``, ``ood_val``) after fitting (ID-only without ood_val).

    Points that differ only in score-only hyper-parameters share one fit: the last fit is kept,
    and a point with the same :func:`fit_key` is scored by a copy of it with the point's values
    (the row's ``refit`` says whether the point fitted); the grid visits such points together
    (``Stage.share``). The detector of the last point is the one the search returns when that
    point wins (``Stage.fitted``): it is fitted on ``fit`` as the final detector would be."""

    def __init__(self, build: Builder, data: TuningData) -> None:
        self.build, self.data = build, data
        self.correct = np.asarray(data.id_val.correct)
        self.last: tuple[tuple[Any, ...], Detector] | None = None
        self.scored: Detector | None = None

    def stage(self) -> Stage:
        return Stage(self.score, fitted=self.fitted,
                     share=lambda point: fit_key(self.build(point)))

    def fitted(self) -> Detector:
        assert self.scored is not None
        return self.scored

    def score(self, point: Mapping[str, Any]) -> dict[str, Any]:
        data = self.data
        det = self.build(point)
        key = fit_key(det)
        refit = self.last is None or self.last[0] != key
        if refit:
            det = det.fit(data.fit, data.model, id_val=data.id_val)
            self.last = (key, det)
        else:
            assert self.last is not None
            det = copy.copy(self.last[1])  # same fitted statistics, other score-only values
            for k, v in split_point(point)[0].items():
                setattr(det, k, v)
        self.scored = det
        id_scores = det.score(data.id_val)
        if data.ood_val is None:
            row: dict[str, Any] = id_metrics(id_scores, self.correct)
        else:
            row = metrics.evaluate(id_scores, det.score(data.ood_val), id_correct=self.correct)
        return {**row, "refit": refit}
