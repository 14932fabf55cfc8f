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
