"""Everything about an experiment that can be checked before its first forward pass.

``run_experiment`` (and ``oodbench run --dry-run``) checks the cells that are left to run, and
stops with every problem found, before any extraction, instead of recording them as failed
cells after minutes of work:

* the data each pending cell needs: the ID test and fit sources and every benchmark's sources
  can be listed (folders exist, hold images, image lists parse; an empty OOD folder is caught
  here), and each benchmark can be built (C-OOD: pool labels, an explicit ``window``);
* each model with pending cells: it loads (an unknown spec or missing weights are caught here),
  the ID labels index its classes (after mapping class folders onto its classes), and the
  C-OOD default window (its number of ID classes) fits the pool.

A model is loaded on the CPU to be checked and released; the executor loads it again (a few
seconds against minutes of extraction). Runtime failures that no check can foresee (NaN
logits, a detector that raises) still fail their cells only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oodbench.errors import InvalidInputError
from oodbench.run.local import Resources, not_applicable
from oodbench.run.plan import Plan


class ExperimentCheckError(InvalidInputError):
    """The experiment cannot run as written; the message lists every problem found."""


def check_plan(plan: Plan, resources: Resources | None = None, *, load_models: bool = True) -> list[str]:
    """Every problem of ``plan`` found without a forward pass (empty: it can run).

    ``resources`` (built here when not given) keeps the sources and benchmarks it built, for the
    executor to reuse. With ``load_models=False`` only the data are checked.
    """
    from oodbench import detectors

    exp = plan.experiment
    resources = resources or Resources(exp)
    problems: list[str] = []

    def attempt(label: str, build: Callable[[], Any]) -> Any:
        try:
            return build()
        except Exception as err:  # every failure is a problem to report, not a crash
            problems.append(f"{label}: {type(err).__name__}: {err}".replace("\n", " "))
            return None

    cells = plan.cells
    benches = {c.benchmark.name: c.benchmark for c in cells}
    needs_fit = any("train" in detectors.detector_class(c.detector).requires for c in cells)
    id_test = attempt("[id].test", resources.id_test) if any(
        b.type != "standard" for b in benches.values()) else None
    id_fit = attempt("[id].fit", resources.id_fit) if needs_fit else None
    built = {name: attempt(f"benchmark {name!r}", lambda n=name: resources.benchmark(n))
             for name, spec in benches.items()
             if spec.type == "standard" or id_test is not None}  # else: [id].test's problem
    if not load_models:
        return problems
    for model_plan in plan.models:
        label = f"model {model_plan.model.name!r}"
        model = attempt(label, model_plan.model.load)
        if model is None:
            continue
        from oodbench.extract.engine import model_labels

        for role, source in (("[id].test", id_test), ("[id].fit", id_fit)):
            if source is not None and not (role == "[id].fit" and _fit_skipped(model_plan, model, exp)):
                attempt(f"{label} on {role}", lambda s=source: model_labels(model, s))
        for name, bench in built.items():
            if hasattr(bench, "check_model"):
                attempt(f"{label} on benchmark {name!r}", lambda b=bench: b.check_model(model.num_classes))
        del model
    return problems


def _fit_skipped(model_plan: Any, model: Any, experiment: Any) -> bool:
    """Whether every cell of the model that needs the fit source is skipped as not applicable."""
    from oodbench import detectors

    requires = [detectors.detector_class(c.detector).requires for c in model_plan.cells]
    return all(not_applicable(r, model, experiment) for r in requires if "train" in r)


def raise_problems(problems: list[str]) -> None:
    """``ExperimentCheckError`` listing ``problems`` (nothing when the list is empty)."""
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ExperimentCheckError(
            f"the experiment cannot run as written ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}; nothing was extracted):\n{listed}"
        )
