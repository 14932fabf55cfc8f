"""Training with OOD-aware losses: a new head on cached features, or fine-tuning a classifier.

    train_head(train_activations, loss="logitnorm", classes=...) -> HeadResult   (no image pass)
"""

from __future__ import annotations

from oodbench.train.head import HeadResult, train_head
from oodbench.train.optim import OptimSettings

__all__ = ["HeadResult", "OptimSettings", "train_head"]
