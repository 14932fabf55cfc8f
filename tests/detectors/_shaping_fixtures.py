"""A tiny live setup for the detectors that run the network (ODIN, MC-dropout): 8x8 grey
images in an ``ArraySource``, a small CNN, and ``Activations`` that point back at the source."""

from __future__ import annotations

import numpy as np
import torch

from oodbench.data import ArraySource
from oodbench.extract.activations import Activations
from oodbench.models.small_cnn import SmallCNN


def live_setup(
    n: int = 10, *, dropout: float = 0.25, seed: int = 0
) -> tuple[SmallCNN, ArraySource, Activations]:
    """(model, source, activations of the model on the source, rows in source order)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, 3, size=n)
    source = ArraySource(images, labels, name="tiny")
    model = SmallCNN(num_classes=3, width=8, dropout=dropout, seed=seed)
    batch = torch.stack([model.transform(source.load(i)) for i in range(n)])
    with torch.no_grad():
        logits = model(batch).numpy()
    acts = Activations(
        logits=logits,
        labels=np.asarray(labels, dtype=np.int64),
        ids=np.array(source.ids),
        source=source,
        source_indices=np.arange(n, dtype=np.int64),
    )
    return model, source, acts


def transformed(model: SmallCNN, source: ArraySource) -> torch.Tensor:
    """Every image of ``source`` through the model's transform, stacked in source order."""
    return torch.stack([model.transform(source.load(i)) for i in range(len(source))])
