"""What a tuning search returns (:class:`TuneResult`), the record it leaves on results rows, and
how its winner is chosen (:func:`best_row`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from oodbench.detectors.base import Detector
from oodbench.errors import InvalidInputError


@dataclass
class TuneResult:
    """What :func:`oodbench.tune` found.

    Attributes:
        best_params: the winning grid point (only the hyper-parameters in the grid).
        detector: a detector with those hyper-parameters, fitted (``detector.hyperparams`` has
            every hyper-parameter it ran with).
        table: one row per grid point, in grid order: the grid's hyper-parameters, every metric
            computed, ``refit`` (whether ``fit`` ran for this point) and ``best``.
        criterion: the metric that chose, and ``best_value`` its value at the winner.
        provenance: how the choice was made: protocol, search and their settings.
    """

    best_params: dict[str, Any]
    detector: Detector
    table: pd.DataFrame
    criterion: str
    best_value: float
    provenance: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The ``tuning`` column of the results table: the provenance, the chosen
        hyper-parameters and the criterion's value there."""
        return {**self.provenance, "criterion": self.criterion, "best_params": self.best_params,
                "best_value": self.best_value}

    def tuning_record(self) -> str:
        """:meth:`record` as canonical JSON (``Detector.tuning``)."""
        return json.dumps(self.record(), sort_keys=True, default=str)


def best_row(rows: list[dict[str, Any]], criterion: str, larger_is_better: bool) -> int:
    """Index of the first row with the best finite value of ``criterion``."""
    values = np.array([float(r.get(criterion, np.nan)) if r.get("status") == "ok" else np.nan
                       for r in rows])
    if not np.isfinite(values).any():
        raise InvalidInputError(
            f"tune: the criterion {criterion!r} is NaN (or the point invalid) at every point tried"
        )
    signed = np.where(np.isfinite(values), values if larger_is_better else -values, -np.inf)
    return int(np.argmax(signed))  # argmax returns the first maximum
