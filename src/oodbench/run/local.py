"""Run a plan in this process, cell by cell, appending each result as soon as it exists.

For each model: load it once; extract the ID fit and ID validation sources once each (when a
detector fits on them: its ``fit_data``; ``[id].fit`` read with ``[id] fit_transform``); create
every detector configuration once (from its preset) and fit it on first use; then run each
benchmark with one detector at a time, so one failing cell is recorded (status ``failed`` and the
error) and the rest goes on. Every extraction goes through the activation cache with the same
``capture`` for all of a model's detectors, so each (model, source) pair is one forward pass.

Each finished cell is appended to the results store at once (its own file: nothing is lost on a
crash), its per-sample scores go to ``scores/<cell>.npz``, and a failure's traceback to
``failures.log``. The warnings of the cells are shown once per run, each with the number of
cells that raised it.
"""

from __future__ import annotations

import functools
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from oodbench import detectors
from oodbench.benchmarks.base import GroupScores, scores_key, skipped_images
from oodbench.benchmarks.kinds import kind_of
from oodbench.extract import extract
from oodbench.models.fit_transforms import DEFAULT_FIT_TRANSFORM, fit_transform
from oodbench.models.preprocessing import using_transform
from oodbench.params import Params
from oodbench.results import table as results_table
from oodbench.results.table import ResultsTable
from oodbench.run import build
from oodbench.run.build import build_benchmark, build_source, run_tuning
from oodbench.run.experiment import Experiment
from oodbench.run.plan import Cell, DetectorConfig, ModelPlan, Plan


@dataclass
class CellResult:
    """What one cell produced: its long rows, its scores (when kept), a failure's traceback and
    the unreadable images its extractions skipped (``benchmarks.base.skipped_images``)."""

    cell: Cell
    rows: pd.DataFrame
    scores: GroupScores | None = None
    traceback: str = ""
    skipped_images: dict[str, Any] = field(default_factory=dict)
    #: (category, message) of each warning the cell raised (once each)
    warnings: tuple[tuple[type[Warning], str], ...] = ()

    @property
    def status(self) -> str:
        return str(self.rows["status"].iloc[0])


Sink = Callable[[CellResult], None]


class _Lazy:
    """A value built on first use; a failure to build it is kept and raised on every use."""

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False

    def get(self) -> Any:
        if not self._done:
            try:
                self._value = self._build()
            except Exception as err:
                self._error = err
            self._done = True
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class Resources:
    """The sources and benchmark objects of an experiment, built once per process on first use,
    and the last model the up-front checks loaded (handed over once, to save loading it again)."""

    experiment: Experiment
    _lazy: dict[str, _Lazy] = field(default_factory=dict)
    _kept: tuple[Any, Any] | None = None

    def keep_model(self, spec: Any, model: Any) -> None:
        """Hold ``model`` (loaded from ``spec``) for :meth:`load_model`; replaces any other."""
        self._kept = (spec, model)

    def load_model(self, spec: Any) -> Any:
        """The model of ``spec``: the one kept by :meth:`keep_model` (once), else a new load."""
        if self._kept is not None and self._kept[0] == spec:
            model, self._kept = self._kept[1], None
            return model
        return build.load_model(spec)

    def _get(self, key: str, build: Callable[[], Any]) -> Any:
        return self._lazy.setdefault(key, _Lazy(build)).get()

    def _source(self, key: str, spec: Any) -> Any:
        return None if spec is None else self._get(key, functools.partial(build_source, spec))

    def id_test(self) -> Any:
        return self._source("id_test", self.experiment.id_test)

    def id_fit(self) -> Any:
        return self._source("id_fit", self.experiment.id_fit)

    def id_val(self) -> Any:
        return self._source("id_val", self.experiment.id_val)

    def benchmark(self, name: str) -> Any:
        spec = next(b for b in self.experiment.benchmarks if b.name == name)
        needs_id = "id_test" in kind_of(spec).needs
        return self._get(f"bench:{name}",
                         lambda: build_benchmark(spec, self.id_test() if needs_id else None))


def not_applicable(det: Any, model: Any, experiment: Experiment, bench: Any = None) -> str | None:
    """Why detector ``det`` (a detector or a :class:`~oodbench.run.plan.DetectorConfig`) cannot
    run on ``model`` here (None: it can); a standard benchmark with its own ID validation split
    (OpenOOD's) provides ``id_val`` data."""
    if "text_embeddings" in det.requires and not hasattr(model, "encode_text"):
        return f"needs CLIP text embeddings; {model.spec} is not a CLIP model (load a clip: spec)"
    if det.fits_on_data and det.fit_data == "train" and experiment.id_fit is None:
        return ("needs ID training activations; add [id] fit = { folder = \"...\" } (ID training "
                "images) to the experiment")
    if (det.fits_on_data and det.fit_data == "id_val" and experiment.id_val is None
            and getattr(bench, "id_val", None) is None):
        return ("fits on held-out ID validation activations (fit_data = \"id_val\"); add [id] val = "
                "{ folder = \"...\" } (ID images the model was not trained on) to the experiment, "
                "or hyperparams = { fit_data = \"train\" }")
    return None


def run_model(
    model_plan: ModelPlan,
    experiment: Experiment,
    sink: Sink,
    *,
    resources: Resources | None = None,
    on_start: Callable[[Cell], None] | None = None,
    progress: bool = True,
    extract_options: Mapping[str, Any] | None = None,
) -> None:
    """Run every cell of one model, handing each :class:`CellResult` to ``sink`` as it finishes.

    ``extract_options`` override the experiment's keyword arguments of ``extract``. The warnings
    a cell raises are kept on its result (``CellResult.warnings``), not shown: the executor
    shows each once per run, with the number of cells that raised it (:class:`WarningTally`).
    """
    resources = resources or Resources(experiment)
    options = {**experiment.extract_options, **(extract_options or {}),
               "capture": model_plan.capture, "progress": progress}
    run_cell = _cell_runner(model_plan, experiment, resources, options)
    for cell in model_plan.cells:
        if on_start is not None:
            on_start(cell)
        with warnings.catch_warnings(record=True) as caught:
            result = run_cell(cell)
        result.warnings = tuple(dict.fromkeys((w.category, str(w.message)) for w in caught))
        sink(result)


def _cell_runner(model_plan: ModelPlan, experiment: Experiment, resources: Resources,
                 options: dict[str, Any]) -> Callable[[Cell], CellResult]:
    """What runs one cell of ``model_plan``: the model is loaded, each source extracted and
    each detector configuration made once, on first use, for all its cells."""
    model_lazy = _Lazy(functools.partial(resources.load_model, model_plan.model))
    fit_lazy = _Lazy(lambda: extract_fit(model_lazy.get(), resources.id_fit(),
                                         experiment.fit_transform, options))
    val_lazy = _Lazy(lambda: extract(model_lazy.get(), resources.id_val(), **options))
    made: dict[DetectorConfig, _Lazy] = {}  # one detector per configuration

    def tuned(cell: Cell) -> tuple[Any, Mapping[str, Any] | None]:
        """The detector with the hyper-parameters ``cell.tune`` chooses (unfitted: the benchmark
        fits it on the whole [id].fit) and the ``tuning`` record."""
        spec = next(d.tune for d in experiment.detectors
                    if d.tune is not None and Params(d.tune.describe()) == cell.tune)
        model = model_lazy.get()
        result = run_tuning(spec, cell.detector, cell.params, model, fit_lazy.get(),
                            lambda source: extract(model, source, **options),
                            val_lazy.get() if experiment.id_val is not None else None)
        det = detectors.create(cell.detector, preset=cell.preset or None, **result.detector.hyperparams)
        return det, result.record()

    def run_cell(cell: Cell) -> CellResult:
        start = time.perf_counter()
        try:
            model = model_lazy.get()
            reason = not_applicable(cell.config, model, experiment,
                                    resources.benchmark(cell.benchmark.name))
            if reason is not None:
                return status_result(cell, "skipped", reason, experiment, start)
            if cell.config not in made:
                made[cell.config] = _Lazy(functools.partial(tuned if cell.tune else untuned, cell))
            det, tuning = made[cell.config].get()
            if det.fitted:  # fitted for an earlier cell: its warning is this cell's too
                det.warn_untuned()
            bench = resources.benchmark(cell.benchmark.name)
            role = det.fit_data if "train" in cell.config.requires else None
            fit = fit_lazy.get() if role == "train" else None
            val = val_lazy.get() if role == "id_val" and experiment.id_val is not None else None
            measured = bench.measure(model, [det], fit_activations=fit, id_val=val, **options)
            rows = results_table.from_wide(
                measured.rows, model=cell.model.name, benchmark=cell.benchmark.name,
                cell=cell.key, seconds=time.perf_counter() - start, time=results_table.now(),
                experiment=experiment.name, tuning=tuning, fit_transform=cell.fit_transform_used,
            )
            skipped = {**measured.skipped_images,
                       **skipped_images(*(a for a in (fit, val) if a is not None))}
            return CellResult(cell, rows, measured.scores.get(scores_key(det)),
                              skipped_images=skipped)
        except Exception as err:
            message = f"{type(err).__name__}: {err}".replace("\n", " ")
            return status_result(cell, "failed", message, experiment, start,
                                 traceback.format_exc())

    return run_cell


def extract_fit(model: Any, source: Any, transform: str, options: Mapping[str, Any]) -> Any:
    """The activations of ``[id].fit``: read with the transform ``[id] fit_transform`` names
    (:mod:`oodbench.models.fit_transforms`; its ``repr`` is part of the cache key, so another
    transform is another forward pass), the model's own restored afterwards."""
    if transform == DEFAULT_FIT_TRANSFORM:
        return extract(model, source, **options)
    with using_transform(model, fit_transform(model, transform)):
        return extract(model, source, **options)


def untuned(cell: Cell) -> tuple[Any, Mapping[str, Any] | None]:
    """The cell's detector with its own hyper-parameters, and no ``tuning`` record."""
    return cell.config.create(), None


class WarningTally:
    """The warnings of a run's cells, each shown once at the end with how many cells raised it
    (a warning every cell raises, such as a large k or corrupt images, is one line, not one
    per cell)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[type[Warning], str], int] = {}
        self.cells = 0

    def add(self, result: CellResult) -> None:
        self.cells += 1
        for key in result.warnings:
            self.counts[key] = self.counts.get(key, 0) + 1

    def show(self) -> None:
        """Each warning once, with its count: ``... (in 12 of 40 cells)``."""
        for (category, message), n in self.counts.items():
            warnings.warn(f"{message} (in {n} of {self.cells} cells)", category, stacklevel=2)
        self.counts.clear()


def failed(cell: Cell, message: str, experiment: Experiment) -> CellResult:
    """A ``failed`` result for a cell that never ran (e.g. its Ray worker died)."""
    return status_result(cell, "failed", message, experiment, time.perf_counter())


def status_result(cell: Cell, status: str, message: str, experiment: Experiment, start: float,
                  trace: str = "") -> CellResult:
    """A ``failed`` or ``skipped`` result of ``cell`` with its reason."""
    rows = results_table.status_row(
        model=cell.model.name, detector=cell.detector, hyperparams=cell.hyperparams,
        benchmark=cell.benchmark.name, cell=cell.key, status=status, error=message,
        seconds=time.perf_counter() - start, time=results_table.now(), experiment=experiment.name,
    )
    return CellResult(cell, rows, traceback=trace)


def write_result(table: ResultsTable, result: CellResult) -> None:
    """Append a cell's rows, keep its scores and skipped images, log a failure's traceback."""
    if result.scores is not None:
        table.save_scores(result.cell.key, *result.scores)
    if result.skipped_images:
        table.add_skipped_images(result.skipped_images)
    if result.traceback:
        with results_table.writing(table.folder, "failures.log"):
            table.folder.mkdir(parents=True, exist_ok=True)
            with open(table.folder / "failures.log", "a", encoding="utf-8") as log:
                log.write(f"== {results_table.now()} {result.cell.label()} [{result.cell.key}]\n")
                log.write(result.traceback + "\n")
    table.append(result.rows)


class LocalExecutor:
    """Runs the cells in this process, model after model, with a rich progress bar.

    ``extract_progress`` shows each extraction's own bar too (default: as ``progress``);
    ``extract_options`` override the experiment's keyword arguments of ``extract``;
    ``resources``: sources and benchmarks already built (by the up-front checks) to reuse.
    """

    def __init__(self, *, progress: bool = True, extract_progress: bool | None = None,
                 console: Any = None, extract_options: Mapping[str, Any] | None = None,
                 resources: Resources | None = None):
        self.progress = progress
        self.extract_progress = progress if extract_progress is None else extract_progress
        self.console = console
        self.extract_options = dict(extract_options or {})
        self.resources = resources

    def run(self, plan: Plan, table: ResultsTable) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from oodbench.extract.progress import interactive

        console = self.console or Console(stderr=True)
        resources = self.resources or Resources(plan.experiment)
        tally = WarningTally()
        total = len(plan.cells)
        lines = self.progress and not (console.is_terminal if self.console else interactive())
        with Progress(TextColumn("[bold]cells[/]"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("{task.description}"), console=console,
                      disable=not self.progress or lines) as bar:
            task = bar.add_task("", total=total)
            started = [0]

            def start(cell: Cell) -> None:
                bar.update(task, description=escape(cell.label()))
                started[0] += 1
                if lines:  # not a terminal: a line per cell instead of a redrawn bar
                    console.print(f"cell {started[0]}/{total}: {cell.label()}", markup=False,
                                  highlight=False, soft_wrap=True)

            def sink(result: CellResult) -> None:
                write_result(table, result)
                tally.add(result)
                if result.status == "failed":
                    bar.console.print(f"[red]failed[/] {escape(result.cell.label())}: "
                                      f"{escape(str(result.rows['error'].iloc[0]))}")
                bar.advance(task)

            try:
                for model_plan in plan.models:
                    run_model(model_plan, plan.experiment, sink, resources=resources,
                              on_start=start, progress=self.extract_progress,
                              extract_options=self.extract_options)
                bar.update(task, description="done")
            finally:
                bar.stop()
                tally.show()  # also when interrupted: the warnings of the cells that ran
