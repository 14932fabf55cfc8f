"""What a training run returns: the trained model and where its files are."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oodbench.models.classifier import Classifier


@dataclass(frozen=True)
class TrainResult:
    """What :func:`oodbench.train.train` produced: the trained model (eval mode) and its files."""

    model: Classifier
    out: Path
    weights: Path  # <out>/model.safetensors, for models.load(spec, weights=...)
    config: dict[str, Any]
    history: list[dict[str, Any]]
    #: epochs a checkpoint in ``out`` already held when this call started (0: a new run)
    resumed_from: int = 0

    def describe_start(self) -> str:
        """``"a new run"``, ``"resumed after epoch 2 of 3"`` or ``"already finished (3 of 3
        epochs)"``: how this call began."""
        total = int(self.config.get("epochs", len(self.history)))
        if self.resumed_from == 0:
            return "a new run"
        if self.resumed_from >= total:
            return f"already finished ({self.resumed_from} of {total} epochs)"
        return f"resumed after epoch {self.resumed_from} of {total}"
