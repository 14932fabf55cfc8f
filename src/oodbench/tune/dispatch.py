"""The searches :func:`oodbench.tune` delegates: a protocol's objective x a search strategy.

    protocol="ood_val"            point -> metrics on (id_val, ood_val) after fitting on ``fit``
                                  (without ood_val: the ID-only criteria of ``oodbench.tune``)
    protocol="held_out_classes"   point -> metrics averaged over simulated ID/OOD variants
                                  (:mod:`oodbench.tune.held_out`)
    search="grid"                 every point of a space of lists, in order
    search="tpe" / "gp"           Optuna's TPE or Gaussian-process sampler
                                  (:mod:`oodbench.tune.optuna_search`)

(The OOD-val grid itself stays in ``oodbench.tune``, where grid points that differ only in
score-only hyper-parameters share one fit.) Whatever the search, the winner is the first best
row in table order (grid order or trial order), NaN never wins, and the returned detector is
fitted with the winning hyper-parameters on the full ``fit`` through the model's own head.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from oodbench import metrics
from oodbench.detectors import Detector, detector_class
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tune.held_out import HeldOutClasses, VariantFactory, held_out_objective
from oodbench.tune.space import (
    check_bounds,
    detector_builder,
    grid_points,
    parse_space,
    split_point,
)

PROTOCOLS = ("ood_val", "held_out_classes", "held_out_paper")
SEARCHES = ("grid", "tpe", "gp")
#: the options of ``oodbench.tune`` beyond protocol and search, with their defaults
OPTIONS: dict[str, Any] = {"n_trials": None, "seed": 0, "storage": None, "study_name": None,
                           "progress": False, "held_out": None}


def check_choice(kind: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise a one-line error unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise InvalidInputError(f"tune: unknown {kind} {value!r}; use one of {list(allowed)}")


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
) -> Any:
    """Run ``protocol`` with ``search`` and return a ``TuneResult`` (see ``oodbench.tune``);
    ``options``: ``n_trials``, ``seed``, ``storage``, ``study_name``, ``progress`` (TPE) and
    ``held_out`` (the held-out-class protocol's settings)."""
    from oodbench.tune import TuneResult

    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], OPTIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInputError(
            f"tune: unknown option {unknown[0]!r}{hint}; options are {', '.join(OPTIONS)}"
        )
    opts = {**OPTIONS, **options}
    n_trials, seed, held_out = opts["n_trials"], opts["seed"], opts["held_out"]
    check_choice("protocol", protocol, PROTOCOLS)
    check_choice("search", search, SEARCHES)
    dims = parse_space(space, allow_ranges=search != "grid")
    build = detector_builder(detector_or_name, list(dims), protocol)
    check_bounds(build, dims)
    cls = type(detector_or_name) if isinstance(detector_or_name, Detector) else detector_class(
        detector_or_name)
    if "model" in cls.requires and protocol.startswith("held_out"):
        raise InvalidInputError(
            f"tune: detector {cls.name!r} runs the live network, which the held-out-class "
            "protocol does not hand to detectors; tune it with protocol='ood_val'"
        )
    if protocol == "held_out_paper":
        from oodbench.tune.paper_protocol import tune_paper

        return tune_paper(build, dims, id_val, ood_val, fit, model, criterion, search, cls.name,
                          opts)
    objective, name, larger, provenance = _objective(
        build, id_val, ood_val, fit, model, criterion, protocol, held_out)
    provenance = {"protocol": protocol, "search": search, **provenance, "criterion": name}

    if search == "grid":
        points = grid_points(dims)  # type: ignore[arg-type]
        for point in points:  # every value is checked before anything is fitted
            build(point)
        rows = [{**point, **objective(point), "status": "ok"} for point in points]
    else:
        from oodbench.tune.optuna_search import bayes_search

        trials = 50 if n_trials is None else n_trials
        signature = {"detector": cls.name, "space": {k: repr(v) for k, v in dims.items()},
                     **provenance}
        rows = bayes_search(objective, dims, sampler=search, criterion=name, larger_is_better=larger,
                          n_trials=trials, seed=seed, storage=opts["storage"],
                          study_name=opts["study_name"], signature=signature,
                          progress=opts["progress"])
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


def _objective(
    build: Callable[[Mapping[str, Any]], Detector],
    id_val: Activations,
    ood_val: Activations | None,
    fit: Activations | None,
    model: Any,
    criterion: str | None,
    protocol: str,
    held_out: HeldOutClasses | Mapping[str, Any] | None,
) -> tuple[Callable[[Mapping[str, Any]], dict[str, float]], str, bool, dict[str, Any]]:
    """(point -> metrics, criterion, larger is better, provenance) of ``protocol``."""
    from oodbench.tune import _id_metrics, _resolve_criterion

    if protocol == "ood_val":
        if held_out is not None:
            raise InvalidInputError("tune: held_out settings need protocol='held_out_classes'")
        name, larger = _resolve_criterion(criterion, with_ood=ood_val is not None)
        provenance = {} if ood_val is not None else {"protocol": "id_only"}
        return (_ood_val_objective(build, id_val, ood_val, fit, model, _id_metrics), name, larger,
                provenance)
    if ood_val is not None:
        raise InvalidInputError(
            "tune: protocol='held_out_classes' simulates OOD with withheld ID classes and "
            "takes no ood_val; pass ood_val=None (or use protocol='ood_val')"
        )
    if fit is None:
        raise InvalidInputError(
            "tune: protocol='held_out_classes' trains variants on labelled ID training "
            "activations: pass fit=train_activations"
        )
    config = held_out if isinstance(held_out, HeldOutClasses) else HeldOutClasses(**(held_out or {}))
    name, larger = _resolve_criterion(criterion, with_ood=True)
    factory = VariantFactory(fit, id_val, config, model)
    return held_out_objective(build, factory, name), name, larger, config.describe()


def _ood_val_objective(
    build: Callable[[Mapping[str, Any]], Detector],
    id_val: Activations,
    ood_val: Activations | None,
    fit: Activations | None,
    model: Any,
    id_metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]],
) -> Callable[[Mapping[str, Any]], dict[str, float]]:
    correct = np.asarray(id_val.correct)

    def objective(point: Mapping[str, Any]) -> dict[str, float]:
        det = build(split_point(point)[0]).fit(fit, model, id_val=id_val)
        id_scores = det.score(id_val)
        if ood_val is None:
            return id_metrics(id_scores, correct)
        return metrics.evaluate(id_scores, det.score(ood_val), id_correct=correct)

    return objective


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
