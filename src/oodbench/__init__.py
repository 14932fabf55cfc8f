"""oodbench: benchmark out-of-distribution detection of image classifiers.

The data flow (see DESIGN.md): ``Source`` -> ``extract(model, source)`` -> ``Activations`` ->
``Detector.fit / .score`` -> scores (higher = more in-distribution) -> ``Benchmark.evaluate`` ->
results table -> report.
"""

from __future__ import annotations

__version__ = "0.1.0"

from oodbench.errors import OodbenchError

__all__ = ["OodbenchError", "__version__", "run_experiment", "tune"]


def __getattr__(name: str):  # lazy: importing oodbench stays cheap
    """``oodbench.run_experiment(path)``; ``oodbench.run`` and ``oodbench.tune`` are the packages
    (``oodbench.tune`` is still callable: ``oodbench.tune(detector, grid, ...)``)."""
    if name == "run_experiment":
        from oodbench.run import run_experiment

        return run_experiment
    if name == "run":
        import importlib

        return importlib.import_module("oodbench.run")
    if name == "tune":  # the callable ``oodbench.tune`` module: oodbench.tune(detector, grid, ...)
        import importlib

        return importlib.import_module("oodbench.tune")
    raise AttributeError(f"module 'oodbench' has no attribute {name!r}")
