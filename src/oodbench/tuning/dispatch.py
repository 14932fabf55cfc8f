"""The searches :func:`oodbench.tune` delegates: a protocol's objective x a search strategy.

    protocol=NAME                 point -> metrics: the objective of the protocol registered
                                  as NAME (:mod:`oodbench.tuning.protocol`; built in: ``ood_val``,
                                  ``held_out_classes``)
    search="grid"                 every point of a space of lists, in order
    search="tpe" / "gp"           Optuna's TPE or Gaussian-process sampler
                                  (:mod:`oodbench.tuning.optuna_search`)

(The OOD-val grid itself stays in ``oodbench.tune``, where grid points that differ only in
score-only hyper-parameters share one fit.) Whatever the search, the winner is the first best
row in table order (grid order or trial order), NaN never wins, and the returned detector is
fitted with the winning hyper-parameters on the full ``fit`` through the model's own head.

Every search here runs inside ``reuse_searches()``: trials that score the same rows against the
same nearest-neighbour bank (KNN, NNGuide) search it once, whatever their k, to the same bits
(:mod:`oodbench.detectors._search_memo`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from oodbench.detectors import Detector, detector_class
from oodbench.detectors._search_memo import reuse_searches
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tuning.protocol import TuningData, TuningProtocol, protocol_class
from oodbench.tuning.result import TuneResult, best_row
from oodbench.tuning.space import check_bounds, detector_builder, grid_points, parse_space

SEARCHES = ("grid", "tpe", "gp")
#: the options of ``oodbench.tune`` beyond protocol and search, with their defaults
OPTIONS: dict[str, Any] = {"n_trials": None, "seed": 0, "storage": None, "study_name": None,
                           "progress": False, "held_out": None, "settings": None}


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
    **options: Any,
) -> TuneResult:
    """Run ``protocol`` with ``search`` and return a ``TuneResult`` (see ``oodbench.tune``);
    ``options``: ``n_trials``, ``seed``, ``storage``, ``study_name``, ``progress`` (TPE) and
    ``settings`` (the protocol's settings; ``held_out`` for the held-out-class protocol)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], OPTIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInputError(
            f"tune: unknown option {unknown[0]!r}{hint}; options are {', '.join(OPTIONS)}"
        )
    opts = {**OPTIONS, **options}
    n_trials, seed = opts["n_trials"], opts["seed"]
    entry = protocol_class(protocol)
    check_choice("search", search, SEARCHES)
    settings = protocol_settings(entry, opts["settings"], opts["held_out"])
    dims = parse_space(space, allow_ranges=search != "grid")
    build = detector_builder(detector_or_name, list(dims), protocol)
    check_bounds(build, dims)
    cls = type(detector_or_name) if isinstance(detector_or_name, Detector) else detector_class(
        detector_or_name)
    entry.check_detector(cls)
    data = TuningData(id_val, ood_val, fit, model)
    if entry.runs_own_search:  # e.g. held_out_paper: a search per M, then M* (its module)
        return entry.tune(build, dims, data, criterion, search, cls.name, settings, opts)
    goal = entry.objective(build, data, criterion, settings)
    name, larger = goal.criterion, goal.larger_is_better
    provenance = {"protocol": protocol, "search": search, **goal.provenance, "criterion": name}

    if search == "grid":
        points = grid_points(dims)  # type: ignore[arg-type]
        for point in points:  # every value is checked before anything is fitted
            build(point)
        rows = [{**point, **goal.score(point), "status": "ok"} for point in points]
    else:
        from oodbench.tuning.optuna_search import bayes_search

        trials = 50 if n_trials is None else n_trials
        signature = {"detector": cls.name, "space": {k: repr(v) for k, v in dims.items()},
                     **provenance}
        rows = bayes_search(goal.score, dims, sampler=search, criterion=name,
                            larger_is_better=larger, n_trials=trials, seed=seed,
                            storage=opts["storage"], study_name=opts["study_name"],
                            signature=signature, progress=opts["progress"])
        provenance.update({"n_trials": trials, "sampler_seed": seed})
    winner = best_row(rows, name, larger)
    table = pd.DataFrame(rows)
    table["best"] = np.arange(len(rows)) == winner
    best_params = {k: rows[winner][k] for k in dims}
    detector = build(best_params).fit(fit, model, id_val=id_val)
    result = TuneResult(best_params=best_params, detector=detector, table=table, criterion=name,
                        best_value=float(rows[winner][name]), provenance=provenance)
    detector.tuning = result.tuning_record()
    return result


def protocol_settings(entry: type[TuningProtocol], settings: Any, by_keyword: Any) -> Any:
    """The protocol's settings from ``settings=`` or its own keyword (``held_out=``)."""
    if by_keyword is not None:
        if entry.keyword != "held_out":
            raise InvalidInputError("tune: held_out settings need protocol='held_out_classes'")
        if settings is not None:
            raise InvalidInputError("tune: give the settings once: settings= or held_out=")
        settings = by_keyword
    return settings if settings is None else entry.parse_settings(settings)
