"""Bayesian optimisation of a detector's hyper-parameters with Optuna: TPE or a Gaussian process.

Two samplers of Optuna (Akiba et al., KDD 2019), chosen by ``search``:

* ``"tpe"``: the tree-structured Parzen estimator of Bergstra, Bardenet, Bengio & Kegl,
  "Algorithms for Hyper-Parameter Optimization" (NeurIPS 2011), ``optuna.samplers.TPESampler``:
  the first 10 points at random, later ones maximise the ratio of the densities of good and bad
  past points.
* ``"gp"``: Bayesian optimisation with a Gaussian-process surrogate (Frazier, "A Tutorial on
  Bayesian Optimization", arXiv 1807.02811), ``optuna.samplers.GPSampler`` (Optuna >= 3.6; a
  Matern-5/2 ARD kernel, log expected improvement maximised by L-BFGS-B, 10 random start-up
  points), with ``deterministic_objective=True`` since every objective here is a deterministic
  function of the point (seeded variants, fixed data). This is the search of Mondal et al.,
  arXiv 2602.05935 ("Optimization Protocol", App. A: "Bayesian optimization with a Gaussian
  process surrogate"). Optuna's GP was preferred to BoTorch: it is already the project's
  search library (one storage, one resume path for TPE and GP) and needs only torch and scipy;
  BoTorch would add gpytorch and a second study format for the same low-dimensional searches.

Both are:

* Seeded: ``seed`` seeds the sampler; one trial at a time: the same objective and seed give the
  same sequence of points (on the CPU).
* Resumable: with ``storage`` (an Optuna storage URL such as ``"sqlite:///tune.db"``) every
  finished trial is stored; calling again with the same ``study_name`` continues the study up
  to ``n_trials`` in total. A resumed study keeps its past trials, but its sampler restarts
  from ``seed`` on that history, so the points after the interruption may differ from those of
  an uninterrupted run (each is still a valid search). A stored study records the search it
  belongs to (detector, space, protocol, criterion, sampler); resuming it with another raises.
* Ctrl-C: the trial it stops is marked failed in the storage and is not counted (a resume runs
  it again); Optuna's log of that trial (a traceback) is dropped and ``Interrupted`` says how
  many trials are kept.
* Progress: ``progress=True`` shows Optuna's progress bar (best value so far).
* A point the detector rejects (e.g. VRA's lower percentile above its upper one when both are
  sampled independently) is recorded as ``invalid`` and reported to Optuna as pruned, which
  the samplers treat as a bad point; it costs no fit.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from oodbench.errors import Interrupted, InvalidInputError, MissingDependencyError
from oodbench.tuning.space import Dimension, Range

#: marker of rows whose point the detector rejected
INVALID = "invalid"


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise MissingDependencyError(
            "tune(search='tpe' or 'gp') uses Optuna: pip install 'oodbench[tune]' (or pip install optuna)"
        ) from None
    return optuna


def _suggest(trial: Any, name: str, dim: Dimension) -> Any:
    if isinstance(dim, Range):
        if dim.is_int:
            step = int(dim.step) if dim.step is not None else 1
            return trial.suggest_int(name, int(dim.low), int(dim.high), step=step, log=dim.log)
        return trial.suggest_float(name, float(dim.low), float(dim.high), step=dim.step, log=dim.log)
    return dim[trial.suggest_categorical(name, list(range(len(dim))))]


class _InterruptFilter(logging.Filter):
    """Drops Optuna's log records of a trial that Ctrl-C stopped (its traceback and "Trial n
    failed"), once ``active``: the caller reports the interrupt in one line."""

    def __init__(self) -> None:
        super().__init__()
        self.active = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.active


@contextmanager
def _quiet(optuna: Any):
    """Optuna logs every trial at INFO; keep it to warnings while we run (restored after)."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(level)


#: search name -> the Optuna sampler it uses
SAMPLERS = ("tpe", "gp")


def _sampler(optuna: Any, sampler: str, seed: int) -> Any:
    if sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, deterministic_objective=True)
    return optuna.samplers.TPESampler(seed=seed)


@dataclass(frozen=True)
class Study:
    """What one search is scored by and kept as, for the grid and Optuna alike: the criterion
    and its direction, the trial budget and sampler seed (Optuna), the storage and study name
    to resume from, ``signature`` (what identifies the search; checked on resume) and whether
    to show progress."""

    criterion: str
    larger_is_better: bool
    n_trials: int
    seed: int
    storage: str | None
    study_name: str | None
    signature: Mapping[str, Any]
    progress: bool


def bayes_search(
    objective: Callable[[Mapping[str, Any]], dict[str, float]],
    space: Mapping[str, Dimension],
    sampler: str,
    search: Study,
) -> list[dict[str, Any]]:
    """Run (or continue) a study with ``sampler`` (``"tpe"`` or ``"gp"``); one row per trial in
    trial order: the point, the metrics (or ``status="invalid"`` and the reason) and ``trial``.

    ``signature`` identifies the search (stored on the study, checked on resume). List values are
    sampled by position, so any value (booleans, strings, None) can be a choice.
    """
    criterion, n_trials, storage, study_name = (search.criterion, search.n_trials, search.storage,
                                                search.study_name)
    if not (isinstance(n_trials, int) and n_trials >= 1):
        raise InvalidInputError(f"tune(search={sampler!r}): n_trials must be an integer >= 1; got {n_trials!r}")
    if storage is not None and not study_name:
        raise InvalidInputError(f"tune(search={sampler!r}): a storage needs a study_name to resume by")
    optuna = _optuna()
    stamp = json.dumps({**search.signature, "sampler": sampler}, sort_keys=True, default=str)
    with _quiet(optuna):
        study = optuna.create_study(
            storage=storage, study_name=study_name, load_if_exists=True,
            direction="maximize" if search.larger_is_better else "minimize",
            sampler=_sampler(optuna, sampler, search.seed),
        )
        stored = study.user_attrs.get("oodbench_search")
        if stored is None:
            study.set_user_attr("oodbench_search", stamp)
        elif stored != stamp:
            raise InvalidInputError(
                f"tune(search={sampler!r}): study {study_name!r} in {storage!r} belongs to another "
                f"search ({stored}); use another study_name to start a new one"
            )
        done = [t for t in study.trials if _counts(t)]

        interrupt = _InterruptFilter()

        def run_trial(trial: Any) -> float:
            point = {name: _suggest(trial, name, dim) for name, dim in space.items()}
            trial.set_user_attr("point", json.dumps(point, default=str))
            try:
                row = objective(point)
            except InvalidInputError as err:
                trial.set_user_attr("status", f"{INVALID}: {err}")
                raise optuna.TrialPruned(str(err)) from None
            except KeyboardInterrupt:
                interrupt.active = True  # Optuna marks the trial failed and re-raises
                raise
            trial.set_user_attr("metrics", json.dumps(row))
            return row[criterion]

        remaining = n_trials - len(done)
        if remaining > 0:
            log = logging.getLogger("optuna.study._optimize")
            log.addFilter(interrupt)
            try:
                study.optimize(run_trial, n_trials=remaining, show_progress_bar=search.progress)
            except KeyboardInterrupt as err:
                kept = len([t for t in study.trials if _counts(t)])
                where = f" in {storage}" if storage is not None else " (no storage: not kept)"
                raise Interrupted(f"{kept} of {n_trials} {sampler.upper()} trials finished{where}; run the "
                                  "same search again to resume") from err
            finally:
                log.removeFilter(interrupt)
    return [_row(t, space) for t in study.trials if _counts(t)]


def _counts(trial: Any) -> bool:
    """Whether a trial counts towards ``n_trials``: it finished (an invalid point is pruned),
    not failed (a trial Ctrl-C stopped is redone on resume)."""
    return trial.state.is_finished() and trial.state.name != "FAIL"


def _row(trial: Any, space: Mapping[str, Dimension]) -> dict[str, Any]:
    attrs = trial.user_attrs
    point = json.loads(attrs["point"]) if "point" in attrs else {}
    row: dict[str, Any] = {name: point.get(name) for name in space}
    if "metrics" in attrs:
        row.update(json.loads(attrs["metrics"]))
        row["status"] = "ok"
    else:
        row["status"] = attrs.get("status", str(trial.state.name).lower())
    row["trial"] = trial.number
    return row
