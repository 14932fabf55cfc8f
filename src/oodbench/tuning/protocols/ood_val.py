"""The ``ood_val`` tuning protocol (OpenOOD v1.5): score each point on ID and OOD validation sets.

A point's detector is fitted on ``fit`` (or on ``id_val``, as its ``fit_data`` says) and scored
with :func:`oodbench.metrics.evaluate` on (``id_val``, ``ood_val``). Without ``ood_val`` the
point is scored on ``id_val`` alone (the ID-only criteria of :mod:`oodbench.tuning.criteria`;
the record then says ``protocol = "id_only"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from oodbench import metrics
from oodbench.errors import InvalidInputError
from oodbench.tuning.criteria import id_metrics, resolve_criterion
from oodbench.tuning.protocol import (
    Builder,
    Objective,
    PointObjective,
    TuningData,
    TuningProtocol,
    register,
)
from oodbench.tuning.space import split_point


@register
class OodValidation(TuningProtocol):
    """OpenOOD v1.5: the point with the best criterion on an OOD validation set wins."""

    name = "ood_val"
    uses_ood = True

    @classmethod
    def objective(cls, build: Builder, data: TuningData, criterion: str | None,
                  settings: Any) -> Objective:
        if settings is not None and dict(settings):
            raise InvalidInputError("tune: held_out settings need protocol='held_out_classes'")
        name, larger = resolve_criterion(criterion, with_ood=data.ood_val is not None)
        provenance = {} if data.ood_val is not None else {"protocol": "id_only"}
        return Objective(ood_val_objective(build, data), name, larger, provenance)


def ood_val_objective(build: Builder, data: TuningData) -> PointObjective:
    """point -> metrics on (``id_val``, ``ood_val``) after fitting (ID-only without ood_val)."""
    correct = np.asarray(data.id_val.correct)

    def objective(point: Mapping[str, Any]) -> dict[str, float]:
        det = build(split_point(point)[0]).fit(data.fit, data.model, id_val=data.id_val)
        id_scores = det.score(data.id_val)
        if data.ood_val is None:
            return id_metrics(id_scores, correct)
        return metrics.evaluate(id_scores, det.score(data.ood_val), id_correct=correct)

    return objective
