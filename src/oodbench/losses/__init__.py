"""Training losses for OOD-aware training: one file per loss, one registry.

    create(name, **options) -> Loss      available() -> list of dicts

``ce`` (cross-entropy, label smoothing), ``logitnorm`` (Wei et al. 2022), ``hem`` (Spratling &
Schütt 2025), ``mm`` (multi-class margin), ``dice`` (soft Dice on class probabilities), ``oe``
(Outlier Exposure, Hendrycks et al. 2019), ``mos`` (group softmax, Huang & Li 2021). Every
module in this package that does not start with an underscore registers its losses on import.
"""

from __future__ import annotations

import importlib
import pkgutil

from oodbench.losses.base import Loss, available, create, loss_class, register

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_") and _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["Loss", "available", "create", "loss_class", "register"]
