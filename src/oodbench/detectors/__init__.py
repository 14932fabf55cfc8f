"""The detector library: one file per detector, one registry.

    create(name, **hyperparams) -> Detector      available() -> list of dicts

Every module in this package that does not start with an underscore defines detectors and
registers them on import.
"""

from __future__ import annotations

import importlib
import pkgutil

from oodbench.detectors.base import (
    Detector,
    NotFittedError,
    available,
    create,
    detector_class,
    register,
)

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_") and _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["Detector", "NotFittedError", "available", "create", "detector_class", "register"]
