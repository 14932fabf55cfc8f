"""Everything about an experiment that can be checked before its first forward pass.

``run_experiment`` (and ``oodbench run --dry-run``) checks the cells that are left to run, and
stops with every problem found, before any extraction, instead of recording them as failed
cells after minutes of work:

* the output folder can be written (checked without creating it);
* the data each pending cell needs: the ID test, fit and validation sources and every benchmark's sources
  can be listed (folders exist, hold images, image lists parse; an empty OOD folder is caught
  here), and each benchmark can be built (C-OOD: pool labels, an explicit ``window``); a
  held-out-class tuning's ``held_out_fraction`` (or a ``held_out_paper`` tuning's M grid)
  withholds at least one of ``[id].fit``'s classes and keeps two;
* each model with pending cells: it loads (an unknown spec or missing weights are caught here),
  the ID labels index its classes (after mapping class folders onto its classes), the
  C-OOD default window (its number of ID classes) fits the pool, and ``[id] fit_transform``
  can be built for it.

A model is loaded on the CPU to be checked and released, except the first one, which the local
executor takes over (so a one-model experiment loads its model once); the others are loaded
again when their turn comes. Runtime failures that no check can foresee (NaN
logits, a detector that raises) still fail their cells only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from oodbench.benchmarks.kinds import kind_of
from oodbench.errors import InvalidInputError
from oodbench.extract.engine import model_labels
from oodbench.models.fit_transforms import DEFAULT_FIT_TRANSFORM, fit_transform
from oodbench.run import build
from oodbench.run.local import Resources, not_applicable
from oodbench.run.plan import Plan


class ExperimentCheckError(InvalidInputError):
    """The experiment cannot run as written; the message lists every problem found."""


class _Problems(list[str]):
    """The problems found so far; ``attempt`` runs a check and records what it raises."""

    def attempt(self, label: str, check: Callable[[], Any]) -> Any:
        try:
            return check()
        except Exception as err:  # every failure is a problem to report, not a crash
            self.append(f"{label}: {type(err).__name__}: {err}".replace("\n", " "))
            return None


def check_plan(plan: Plan, resources: Resources | None = None, *, load_models: bool = True,
               keep_first_model: bool = False) -> list[str]:
    """Every problem of ``plan`` found without a forward pass (empty: it can run).

    ``resources`` (built here when not given) keeps the sources and benchmarks it built, for the
    executor to reuse, and with ``keep_first_model`` the first model it loaded. With
    ``load_models=False`` only the data are checked.
    """
    from oodbench.results.table import check_writable

    resources = resources or Resources(plan.experiment)
    problems = _Problems()
    problems.attempt("[experiment].output",
                     partial(check_writable, plan.experiment.output, create=False))
    benches = {c.benchmark.name: c.benchmark for c in plan.cells}
    needs_fit = any(c.config.fits_on("train") for c in plan.cells)
    needs_val = any(c.config.fits_on("id_val") for c in plan.cells)
    needs_test = any("id_test" in kind_of(b).needs for b in benches.values())
    id_test = problems.attempt("[id].test", resources.id_test) if needs_test else None
    id_fit = problems.attempt("[id].fit", resources.id_fit) if needs_fit else None
    id_val = problems.attempt("[id].val", resources.id_val) if needs_val else None
    if id_fit is None and any(c.tune for c in plan.cells):
        id_fit = problems.attempt("[id].fit", resources.id_fit)
    if id_fit is not None:
        _check_tuning_classes(plan, id_fit, problems)
    built = {name: problems.attempt(f"benchmark {name!r}", partial(resources.benchmark, name))
             for name, spec in benches.items()
             if "id_test" not in kind_of(spec).needs or id_test is not None}  # else: [id].test's
    if load_models:
        for model_plan in plan.models:
            label = f"model {model_plan.model.name!r}"
            model = problems.attempt(label, partial(build.load_model, model_plan.model))
            if model is not None:
                sources = {"[id].test": id_test}
                if not _role_skipped(model_plan, model, plan.experiment, "train"):
                    sources["[id].fit"] = id_fit
                    _check_fit_transform(model, label, plan.experiment.fit_transform, problems)
                if not _role_skipped(model_plan, model, plan.experiment, "id_val"):
                    sources["[id].val"] = id_val
                _check_model(model, label, sources, built, problems)
                if keep_first_model and model_plan is plan.models[0]:
                    resources.keep_model(model_plan.model, model)  # the executor's first load
    return list(problems)


def _check_model(model: Any, label: str, sources: dict[str, Any], benchmarks: dict[str, Any],
                 problems: _Problems) -> None:
    """The ID labels index the model's classes; each benchmark accepts its class count."""
    for role, source in sources.items():
        if source is not None:
            problems.attempt(f"{label} on {role}", partial(model_labels, model, source))
    for name, bench in benchmarks.items():
        if hasattr(bench, "check_model"):
            problems.attempt(f"{label} on benchmark {name!r}",
                             partial(bench.check_model, model.num_classes))


def _check_fit_transform(model: Any, label: str, name: str, problems: _Problems) -> None:
    """``[id] fit_transform`` can be built for ``model`` (e.g. MOOD's augmentation takes the
    mean and std of the model's ``Normalize``)."""
    if name != DEFAULT_FIT_TRANSFORM:
        problems.attempt(f"{label}: [id] fit_transform = {name!r}",
                         partial(fit_transform, model, name))


def _check_tuning_classes(plan: Plan, id_fit: Any, problems: _Problems) -> None:
    """Every tuned entry's protocol accepts the number of ``[id].fit``'s classes
    (``TuningProtocol.check_fit_classes``: a held-out fraction or an M grid that withholds at
    least one class and keeps two), before anything is extracted or trained."""
    import numpy as np

    labels = np.asarray(id_fit.labels)
    n_classes = int(np.unique(labels[labels >= 0]).size)
    for i, spec in enumerate(plan.experiment.detectors):
        tune = spec.tune
        if tune is not None:
            problems.attempt(f"[[detectors]] #{i + 1} ({spec.name}).tune on [id].fit", partial(
                tune.protocol_class.check_fit_classes, tune.protocol_settings, tune.space,
                n_classes))


def _role_skipped(model_plan: Any, model: Any, experiment: Any, role: str) -> bool:
    """Whether every cell of the model whose detector fits on ``role`` data is skipped as not
    applicable."""
    return all(not_applicable(c.config, model, experiment)
               for c in model_plan.cells if c.config.fits_on(role))


def raise_problems(problems: list[str]) -> None:
    """``ExperimentCheckError`` listing ``problems`` (nothing when the list is empty)."""
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ExperimentCheckError(
            f"the experiment cannot run as written ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}; nothing was extracted):\n{listed}"
        )
