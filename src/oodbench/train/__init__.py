"""Training with OOD-aware losses: a new head on cached features, or fine-tuning a classifier.

    train_head(train_activations, loss="logitnorm", classes=...) -> HeadResult   (no image pass)
    train(model, source, loss="hem", trainable="all", out="runs/x") -> TrainResult (fine-tuning)

Both take ``optim=OptimSettings(...)`` (:mod:`oodbench.train.optim`: the one optimiser-settings
type, its defaults and the presets each entry point starts from).
"""

from __future__ import annotations

from oodbench.train.finetune import TrainResult, train
from oodbench.train.head import HeadResult, train_head
from oodbench.train.optim import OptimSettings

__all__ = ["HeadResult", "OptimSettings", "TrainResult", "train", "train_head"]
