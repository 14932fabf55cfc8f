"""Run a plan on a Ray cluster: one Ray task per model, results written by the driver.

Each task runs :func:`oodbench.run.local.run_model` for one model on a worker (asking for
``num_gpus`` GPUs and ``num_cpus`` CPUs) and returns its :class:`~oodbench.run.local.CellResult`
list; the driver appends each model's results to the table as its task finishes, so finished
models are kept when a later one fails (each cell is one file of the store: appending does not
grow with the table). The warnings of the cells are shown by the driver, once each. The cells of several models run concurrently.

Inside a model's task each extraction is itself spread over the cluster
(``extract(..., executor="ray")``, :mod:`oodbench.extract.ray_shards`): its shards are Ray tasks
that take the GPUs, so a model task needs none by default (``num_gpus=0``; its detectors run on
its CPU), and while it waits for its shards Ray lends its CPU to them. ``shard_extraction=False``
runs each model's extractions inside its own task instead (then give it ``num_gpus=1``). The
workers need the same data paths and the same activation cache location (``OODBENCH_CACHE`` on
shared storage).

Install with ``pip install oodbench[ray]``; connect to a running cluster with ``address="auto"``
(or start a local one with the default ``address=None``).
"""

from __future__ import annotations

from typing import Any

from oodbench.extract.ray_shards import import_ray
from oodbench.results.table import ResultsTable
from oodbench.run.experiment import Experiment
from oodbench.run.local import CellResult, WarningTally, failed, write_result
from oodbench.run.plan import ModelPlan, Plan


def _run_model_task(model_plan: ModelPlan, experiment: Experiment,
                    extract_options: dict[str, Any]) -> list[CellResult]:
    """The body of one Ray task: every cell of one model, collected."""
    from oodbench.run.local import run_model

    results: list[CellResult] = []
    run_model(model_plan, experiment, results.append, progress=False,
              extract_options=extract_options)
    return results


class RayExecutor:
    """One Ray task per model (``num_gpus`` / ``num_cpus`` each); the driver writes the table.

    ``shard_extraction``: extractions fan out as Ray tasks, one per cache shard (the default;
    ``extract_options["executor"]``, e.g. a :class:`~oodbench.extract.RayShards`, overrides it).
    """

    def __init__(self, *, address: str | None = None, num_gpus: float = 0, num_cpus: float = 1,
                 progress: bool = True, extract_options: dict[str, Any] | None = None,
                 shard_extraction: bool = True):
        self.address, self.num_gpus, self.num_cpus = address, num_gpus, num_cpus
        self.progress = progress
        self.extract_options = {"executor": "ray" if shard_extraction else "local",
                                **(extract_options or {})}

    def run(self, plan: Plan, table: ResultsTable) -> None:
        ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, ignore_reinit_error=True, log_to_driver=self.progress)
        task = ray.remote(num_gpus=self.num_gpus, num_cpus=self.num_cpus)(_run_model_task)
        refs = {task.remote(m, plan.experiment, self.extract_options): m for m in plan.models}
        pending = list(refs)
        tally = WarningTally()
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                try:
                    results = ray.get(done[0])
                except ray.exceptions.RayError as err:  # the worker died: its cells failed
                    message = f"Ray task failed: {type(err).__name__}: {err}".replace("\n", " ")
                    results = [failed(cell, message, plan.experiment)
                               for cell in refs[done[0]].cells]
                for result in results:
                    write_result(table, result)
                    tally.add(result)
        finally:
            tally.show()
