"""oodbench: benchmark out-of-distribution detection of image classifiers.

The data flow (see DESIGN.md): ``Source`` -> ``extract(model, source)`` -> ``Activations`` ->
``Detector.fit / .score`` -> scores (higher = more in-distribution) -> ``Benchmark.evaluate`` ->
results table -> report.
"""

from __future__ import annotations

__version__ = "0.1.0"

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oodbench.errors import OodbenchError

if TYPE_CHECKING:
    from oodbench.extract.activations import Activations
    from oodbench.tuning.result import TuneResult

__all__ = ["OodbenchError", "__version__", "run_experiment", "tune"]


def tune(detector_or_name: Any, grid: Mapping[str, Sequence[Any]] | str, id_val: Activations,
         ood_val: Activations | None = None, **kwargs: Any) -> TuneResult:
    """Pick a detector's hyper-parameters: :func:`oodbench.tuning.api.tune` (see
    :mod:`oodbench.tuning`), loaded on the first call.

        oodbench.tune("react", {"percentile": [85, 90, 95, 99]}, id_val, ood_val, fit=train)
    """
    from oodbench.tuning.api import tune as search

    return search(detector_or_name, grid, id_val, ood_val, **kwargs)


def __getattr__(name: str) -> Any:  # lazy: importing oodbench stays cheap
    """``oodbench.run_experiment(path)`` (:func:`oodbench.run.run_experiment`) and the package
    ``oodbench.run``, loaded on first use."""
    if name == "run_experiment":
        from oodbench.run import run_experiment

        return run_experiment
    if name == "run":
        import importlib

        return importlib.import_module("oodbench.run")
    raise AttributeError(f"module 'oodbench' has no attribute {name!r}")
