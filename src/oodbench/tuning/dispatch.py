"""The one search driver of :func:`oodbench.tune`: a protocol's objective x a search strategy.

    protocol=NAME                 what a point scores: the stages of the protocol registered
                                  as NAME (:mod:`oodbench.tuning.protocol`; built in:
                                  ``ood_val``, ``held_out_classes``, ``held_out_paper``,
                                  ``noise``, ``fgsm``)
    search="grid"                 every point of a space of lists, in order (OpenOOD's order,
                                  the first name fastest, for ``grid="openood"``)
    search="tpe" / "gp"           Optuna's TPE or Gaussian-process sampler
                                  (:mod:`oodbench.tuning.optuna_search`)

Every protocol goes through :func:`search`: the space is parsed and checked against the
detector's declarations before anything is fitted (every grid point built), the protocol
supplies its :class:`~oodbench.tuning.protocol.Objective` (its data and criterion), and
:func:`trials` -- the only loop over a space in ``oodbench.tuning`` -- enumerates or samples
the points of each stage, scores each with the stage's objective and records one row per
trial (the point, its metrics, ``status``; ``trial`` under Optuna). The winner of a stage is
its first best row (grid order or trial order; NaN and invalid points never win); a protocol of
several stages (``held_out_paper``'s M, ``noise``'s sigma) scores each stage's winner on fresh
draws and keeps the first best stage. The returned detector is the winner fitted on the full
``fit`` through the model's own head -- the trial's own detector where the protocol fitted it on
those data (``ood_val``: no second fit).

Grid points that differ only in score-only hyper-parameters (``Detector.score_only_hyperparams``)
share one fit where the protocol says so (``ood_val``; the table's ``refit`` column).

Every search here runs inside ``reuse_searches()``: trials that score the same rows against the
same nearest-neighbour bank (KNN, NNGuide) search it once, whatever their k, to the same bits
(:mod:`oodbench.detectors._search_memo`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from oodbench.detectors import Detector
from oodbench.detectors._search_memo import reuse_searches
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tuning.optuna_search import Study, bayes_search
from oodbench.tuning.protocol import Objective, Stage, TuningData, TuningProtocol, protocol_class
from oodbench.tuning.result import TuneResult, best_row
from oodbench.tuning.space import (
    DetectorBuilder,
    Dimension,
    check_bounds,
    detector_builder,
    grid_points,
    parse_space,
)

SEARCHES = ("grid", "tpe", "gp")
#: the options of ``oodbench.tune`` beyond protocol and search, with their defaults
OPTIONS: dict[str, Any] = {"n_trials": None, "seed": 0, "storage": None, "study_name": None,
                           "progress": False, "held_out": None, "settings": None}
#: trials of a Bayesian search when ``n_trials`` is not given
DEFAULT_TRIALS = 50


def check_choice(kind: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise a one-line error unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise InvalidInputError(f"tune: unknown {kind} {value!r}; use one of {list(allowed)}")


@reuse_searches()
def search(
    detector_or_name: Detector | str,
    space: Mapping[str, Any],
    id_val: Activations,
    ood_val: Activations | None,
    *,
    fit: Activations | None,
    model: Any,
    criterion: str | None,
    protocol: str,
    search: str,
    grid: str = "custom",
    **options: Any,
) -> TuneResult:
    """Run ``protocol`` with ``search`` and return a ``TuneResult`` (see ``oodbench.tune``);
    ``grid``: the name of the space searched (``"custom"`` for a given one); ``options``:
    ``n_trials``, ``seed``, ``storage``, ``study_name``, ``progress`` (Optuna) and
    ``settings`` (the protocol's settings; ``held_out`` for the held-out-class protocols)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], OPTIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInputError(
            f"tune: unknown option {unknown[0]!r}{hint}; options are {', '.join(OPTIONS)}"
        )
    opts = {**OPTIONS, **options}
    entry = protocol_class(protocol)
    check_choice("search", search, SEARCHES)
    settings = protocol_settings(entry, opts["settings"], opts["held_out"])
    dims = parse_space(space, allow_ranges=search != "grid")
    build = detector_builder(detector_or_name, list(dims), protocol)
    check_bounds(build, dims)
    entry.check_detector(build.cls)
    points = None
    if search == "grid":
        points = grid_points(dims, first_fastest=grid == "openood")  # type: ignore[arg-type]
        for point in points:  # every value is checked before anything is fitted
            build(point)
    data = TuningData(id_val, ood_val, fit, model)
    goal = entry.objective(build, data, criterion, settings)
    record = {"protocol": protocol, "search": search, **goal.provenance,
              "criterion": goal.criterion}
    stamp = goal.signature if goal.signature is not None else record
    run = _Runner(build, dims, points, search, goal, opts,
                  {"detector": build.cls.name, "space": {k: repr(v) for k, v in dims.items()},
                   **stamp})
    phi, table, value, detector, staged = run.stages()
    record.update(staged)
    if search != "grid":
        record.update({"n_trials": run.n_trials, "sampler_seed": opts["seed"]})
    if grid != "custom":  # a named space: record which
        record["grid"] = grid
    if detector is None:
        detector = build(phi).fit(fit, model, id_val=id_val)
    result = TuneResult(best_params=phi, detector=detector, table=table,
                        criterion=goal.criterion, best_value=value, provenance=record)
    detector.tuning = result.tuning_record()
    return result


class _Runner:
    """The stages of one search: each searched by :func:`trials`, its winner kept, and (for a
    protocol of several stages) the stage whose winner scores best on fresh draws."""

    def __init__(self, build: DetectorBuilder, dims: Mapping[str, Dimension],
                 points: list[dict[str, Any]] | None, search: str, goal: Objective,
                 opts: Mapping[str, Any], signature: dict[str, Any]) -> None:
        self.build, self.dims, self.points, self.search, self.goal = build, dims, points, search, goal
        self.opts, self.signature = opts, signature
        self.n_trials = DEFAULT_TRIALS if opts["n_trials"] is None else opts["n_trials"]

    def stages(self) -> tuple[dict[str, Any], pd.DataFrame, float, Detector | None,
                              dict[str, Any]]:
        """(phi, table, best value, the winner's detector if a trial fitted it, what the record
        adds: ``per_<label>`` and ``<label>_star`` for a protocol of several stages)."""
        goal, name = self.goal, self.goal.criterion
        label = goal.label
        per: list[dict[str, Any]] = []
        tables: list[pd.DataFrame] = []
        kept: list[Detector | None] = []
        for stage in goal.all_stages():
            keeper = _Keeper(stage, name, goal.larger_is_better)
            study = Study(criterion=name, larger_is_better=goal.larger_is_better,
                          n_trials=self.n_trials, seed=self.opts["seed"] + stage.key,
                          storage=self.opts["storage"], study_name=self._study(stage),
                          signature={**self.signature, **({label: stage.key} if label else {}),
                                     **({"criterion": name} if label else {})},
                          progress=self.opts["progress"])
            rows = trials(keeper, self.dims, self.points, self.search, study, share=stage.share)
            best = best_row(rows, name, goal.larger_is_better)
            phi = {k: rows[best][k] for k in self.dims}
            entry = {"best_params": phi, "objective": float(rows[best][name])}
            if stage.validate is not None:  # fresh draws (Algorithm 3, Eq. 3 resampled)
                entry["validation"] = stage.validate(phi)[name]
            per.append({**({label: stage.value} if label else {}), **entry})
            frame = pd.DataFrame(rows)
            if label:
                frame = frame.assign(**{label: stage.value,
                                        f"best_of_{label.lower()}": np.arange(len(rows)) == best})
            tables.append(frame)
            kept.append(keeper.detector_for(phi))
        if not per:
            raise InvalidInputError("tune: the protocol gave no stage to search")
        if not label:  # one search: its winner
            table = tables[0]
            table["best"] = np.arange(len(table)) == best
            return per[0]["best_params"], table, float(per[0]["objective"]), kept[0], {}
        sign = 1.0 if goal.larger_is_better else -1.0
        star = int(np.nanargmax([float(p.get("validation", p["objective"])) * sign for p in per]))
        table = pd.concat(tables, ignore_index=True)
        table["best"] = (table[label] == per[star][label]) & table[f"best_of_{label.lower()}"]
        value = float(per[star].get("validation", per[star]["objective"]))
        return (dict(per[star]["best_params"]), table, value, kept[star],
                {f"per_{label.lower()}": per, f"{label.lower()}_star": per[star][label]})

    def _study(self, stage: Stage) -> str | None:
        study = self.opts["study_name"]
        if not study or not self.goal.label:
            return study
        return f"{study}-{self.goal.label}{stage.key}"


class _Keeper:
    """A stage's objective that also keeps the detector of the best point so far, where the
    stage fitted it on the final data (``Stage.fitted``), so that the winner needs no refit."""

    def __init__(self, stage: Stage, criterion: str, larger_is_better: bool) -> None:
        self.stage, self.criterion, self.sign = stage, criterion, 1.0 if larger_is_better else -1.0
        self.best: tuple[float, dict[str, Any], Detector] | None = None

    def __call__(self, point: Mapping[str, Any]) -> dict[str, Any]:
        row = self.stage.score(point)
        if self.stage.fitted is not None:
            value = float(row.get(self.criterion, math.nan))
            if math.isfinite(value) and (self.best is None or value * self.sign > self.best[0]):
                self.best = (value * self.sign, dict(point), self.stage.fitted())
        return row

    def detector_for(self, phi: Mapping[str, Any]) -> Detector | None:
        """The kept detector when it is the one fitted for ``phi``, else None."""
        if self.best is None or any(self.best[1].get(k) != v for k, v in phi.items()):
            return None
        return self.best[2]


def trials(
    score: Any,
    dims: Mapping[str, Dimension],
    points: list[dict[str, Any]] | None,
    search: str,
    study: Study,
    share: Any = None,
) -> list[dict[str, Any]]:
    """One search: the rows of every trial, in grid order (``points``, ``search="grid"``; points
    with the same ``share(point)`` are scored one after another, so that they can share a fit)
    or in trial order (Optuna's ``search``, :func:`~oodbench.tuning.optuna_search.bayes_search`,
    which records rows the same way and also an invalid point's reason)."""
    if search != "grid":
        return bayes_search(score, dims, search, study)
    assert points is not None
    order = list(range(len(points)))
    if share is not None:  # grid points that share a fit, together (first appearance first)
        groups: dict[Any, list[int]] = {}
        for i, point in enumerate(points):
            groups.setdefault(share(point), []).append(i)
        order = [i for members in groups.values() for i in members]
    rows: list[dict[str, Any]] = [{} for _ in points]
    for i in order:
        rows[i] = {**points[i], **score(points[i]), "status": "ok"}
    return rows


def protocol_settings(entry: type[TuningProtocol], settings: Any, by_keyword: Any) -> Any:
    """The protocol's settings from ``settings=`` or its own keyword (``held_out=``),
    validated once (:meth:`TuningProtocol.parse_settings`)."""
    if by_keyword is not None:
        if entry.keyword != "held_out":
            raise InvalidInputError("tune: held_out settings need protocol='held_out_classes'")
        if settings is not None:
            raise InvalidInputError("tune: give the settings once: settings= or held_out=")
        settings = by_keyword
    return entry.parse_settings(settings)
