"""Training with OOD-aware losses: a new head on cached features, or fine-tuning a classifier.

    train_head(train_activations, loss="logitnorm", classes=...) -> HeadResult   (no image pass)
    train(model, source, loss="hem", trainable="all", out="runs/x") -> TrainResult (fine-tuning)

Both take ``optim=OptimSettings(...)`` (:mod:`oodbench.train.optim`: the one optimiser-settings
type, its defaults and the presets each entry point starts from). The training methods a loss
trains with are the files of :mod:`oodbench.train.methods` (:mod:`oodbench.train.method_registry`).

This package is light: importing it (or one of its modules, such as the method registry) loads
no entry point; the names below are imported from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oodbench.train.finetune import train
    from oodbench.train.head import HeadResult, train_head
    from oodbench.train.optim import OptimSettings
    from oodbench.train.result import TrainResult

#: name -> the module that defines it (imported on first use)
_LAZY = {
    "HeadResult": "oodbench.train.head",
    "OptimSettings": "oodbench.train.optim",
    "TrainResult": "oodbench.train.result",
    "train": "oodbench.train.finetune",
    "train_head": "oodbench.train.head",
}

__all__ = ["HeadResult", "OptimSettings", "TrainResult", "train", "train_head"]


def __getattr__(name: str) -> Any:
    """``oodbench.train.train``, ``OptimSettings``, ... from their modules."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
