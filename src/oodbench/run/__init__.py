"""Experiments: models x detectors x benchmarks from a TOML file, run locally or on Ray.

    import oodbench
    df = oodbench.run_experiment("experiment.toml")   # the tidy results as a DataFrame
    oodbench.results.wide(df)["auroc"]                # one column per metric

``run_experiment`` plans the grid (:mod:`oodbench.run.plan`), records its cells as the output
folder's current experiment (what every view of the folder shows), skips the cells already
finished in ``<output>/results/``, runs the rest (:class:`~oodbench.run.local.LocalExecutor`, or
:class:`~oodbench.run.ray_executor.RayExecutor` with ``executor="ray"``) and returns the latest
rows of every cell of the experiment. The CLI equivalent is ``oodbench run EXPERIMENT.toml``.
``oodbench.run`` is only this package (it used to be callable as well, by swapping its module's
class: ``oodbench.run_experiment`` is the one entry point).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from oodbench.results.table import ResultsTable

if TYPE_CHECKING:
    from oodbench.errors import Interrupted
    from oodbench.run.experiment import Experiment
    from oodbench.run.local import Resources
    from oodbench.run.plan import Plan

__all__ = ["PreparedRun", "prepare", "run_experiment"]


@dataclass(frozen=True)
class PreparedRun:
    """An experiment planned once: its plan, its results table and the cells left to run (the
    results file read once). ``oodbench run`` prints it, then hands it to
    :func:`run_experiment`, which plans nothing again."""

    experiment: Experiment
    plan: Plan
    table: ResultsTable
    pending: Plan  # the cells of ``plan`` not finished in ``table``


class Executor(Protocol):
    """What runs the cells of a plan into a results table (local, Ray, or a user's own)."""

    def run(self, plan: Plan, table: ResultsTable) -> None: ...


def prepare(experiment: str | Path | Mapping[str, Any] | Experiment | PreparedRun) -> PreparedRun:
    """Read (a path or mapping), plan and compare with the results already in its output
    (read only: nothing is written, so ``oodbench run --dry-run`` leaves no trace)."""
    from oodbench.run.experiment import Experiment, load_experiment
    from oodbench.run.plan import make_plan
    from oodbench.run.resolve import resolve

    if isinstance(experiment, PreparedRun):
        return experiment
    if isinstance(experiment, Experiment):
        exp = experiment
    else:  # a path, or a mapping with the file's structure
        exp = load_experiment(experiment)
    plan = make_plan(exp, resolve(exp))  # resolve: the one step that reads files (weights digests)
    table = ResultsTable(exp.output)
    return PreparedRun(exp, plan, table, plan.pending(table.finished_cells()))


def run_experiment(
    experiment: str | Path | Mapping[str, Any] | Experiment | PreparedRun,
    *,
    executor: str | Executor = "local",
    progress: bool = True,
    extract_progress: bool | None = None,
    extract_options: Mapping[str, Any] | None = None,
    check: bool = True,
) -> pd.DataFrame:
    """Run an experiment and return its results (one row per cell x group x metric).

    Args:
        experiment: a TOML file path, a parsed :class:`~oodbench.run.experiment.Experiment`, a
            mapping with the TOML's structure (relative paths resolved against the current
            folder), or a :class:`PreparedRun` (planned already: not planned again).
        executor: ``"local"`` (this process), ``"ray"`` (one Ray task per model, whose
            extractions run as one Ray task per cache shard; needs ``pip install
            oodbench[ray]``) or an object with ``run(plan, table)``.
        progress: show the progress bar over cells.
        extract_progress: show each extraction's progress bar (default: as ``progress``).
        extract_options: keyword arguments of :func:`oodbench.extract.extract` for every
            extraction, over the experiment's own (e.g. ``{"shard_size": 256, "repair":
            True}``); they do not change any cell's key.
        check: before the first forward pass, check the cells left to run
            (:mod:`oodbench.run.checks`: data, models, labels, C-OOD windows) and raise
            ``ExperimentCheckError`` listing every problem; ``False`` skips it (e.g. a Ray
            driver that cannot see the data).

    Returns:
        The latest rows of every cell of this experiment (finished earlier or now), with the
        columns of :data:`oodbench.results.table.SCHEMA`: the *long* table, one ``(metric,
        value)`` per row. ``oodbench.results.wide(df)`` pivots it to one row per (model,
        detector configuration, benchmark, group) with a column per metric (``["auroc"]``).
    """
    from oodbench.run.checks import check_plan, raise_problems
    from oodbench.run.local import Resources

    prepared = prepare(experiment)
    exp, plan, table, pending = prepared.experiment, prepared.plan, prepared.table, prepared.pending
    keys = [c.key for c in plan.cells]
    resources = Resources(exp) if pending.models else None
    if resources is not None and check:  # the output folder among the other problems
        raise_problems(check_plan(pending, resources, keep_first_model=executor == "local"))
    # the one write before the cells: the record, and with cells to run the configuration files
    # (the folder must then be writable; else a warning, and the record stays as it was)
    table.start_experiment(keys, exp.name,
                           exp.configuration_files() if resources is not None else None)
    if resources is not None:
        extract_bars = progress if extract_progress is None else extract_progress
        runner = _executor(executor, progress, extract_bars, dict(extract_options or {}),
                           resources)
        try:
            runner.run(pending, table)
        except KeyboardInterrupt as err:
            raise interrupted(exp, pending, table, err) from err
    return table.read(cells=keys)


def interrupted(exp: Experiment, pending: Plan, table: ResultsTable,
                err: KeyboardInterrupt) -> Interrupted:
    """The :class:`~oodbench.errors.Interrupted` of a run stopped by Ctrl-C: how many of the
    cells left to run finished (they are in the results table), that the activations extracted
    so far are cached, and the command that resumes."""
    from oodbench.errors import Interrupted

    left = {c.key for c in pending.cells}
    done = len(left & table.finished_cells())
    where = f" {exp.file}" if exp.file is not None else ""
    detail = f" ({err})" if isinstance(err, Interrupted) and str(err) else ""
    return Interrupted(
        f"{done} of the {len(left)} cells left to run finished and are kept in {table.path}; "
        f"the activations extracted so far are cached{detail}; run `oodbench run{where}` again "
        "to resume"
    )


def _executor(executor: str | Executor, progress: bool, extract_progress: bool,
              extract_options: dict[str, Any], resources: Resources) -> Executor:
    if executor == "local":
        from oodbench.run.local import LocalExecutor

        return LocalExecutor(progress=progress, extract_progress=extract_progress,
                             extract_options=extract_options, resources=resources)
    if executor == "ray":
        from oodbench.run.ray_executor import RayExecutor

        return RayExecutor(progress=progress, extract_options=extract_options)
    if isinstance(executor, str):
        from oodbench.errors import UnknownNameError

        raise UnknownNameError("executor", executor, ["local", "ray"])
    return executor

