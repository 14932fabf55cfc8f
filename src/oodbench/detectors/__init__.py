"""The detector library: one file per detector, one registry, protocol presets as data.

    create(name, preset=None, **hyperparams) -> Detector      available() -> list of dicts
    declared_hyperparameters(cls) -> each hyper-parameter's declared valid values
    preset_for(name, protocol) -> Preset   (``presets.toml``: "paper", "openood", "cood", ...)

Every module in this package that does not start with an underscore (besides ``base`` and
``presets``) defines detectors and registers them on import.
"""

from __future__ import annotations

import importlib
import pkgutil

from oodbench.detectors.base import (
    Detector,
    NotFittedError,
    available,
    check_configuration,
    create,
    declared_hyperparameters,
    detector_class,
    hyperparameter_names,
    register,
)
from oodbench.detectors.presets import preset_for

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_") and _mod.name not in ("base", "presets"):
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = [
    "Detector", "NotFittedError", "available", "check_configuration", "create",
    "declared_hyperparameters", "detector_class", "hyperparameter_names", "preset_for", "register",
]
