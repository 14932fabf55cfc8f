"""oodbench: benchmark out-of-distribution detection of image classifiers.

The data flow (see DESIGN.md): ``Source`` -> ``extract(model, source)`` -> ``Activations`` ->
``Detector.fit / .score`` -> scores (higher = more in-distribution) -> ``Benchmark.evaluate`` ->
results table -> report.
"""

from __future__ import annotations

__version__ = "0.1.0"

from oodbench.errors import OodbenchError

__all__ = ["OodbenchError", "__version__"]
