"""A tiny live setup for the detectors that run the network (ODIN, MC-dropout): 8x8 grey
images in an ``ArraySource``, a small CNN, and ``Activations`` that point back at the source;
and a random two-block timm ViT for the C-OOD paper's ViT dropout."""

from __future__ import annotations

from typing import Any

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


def tiny_vit_setup(seed: int = 0, n: int = 4) -> tuple[Any, Activations, torch.nn.Module, torch.Tensor]:
    """A random 2-block timm ViT-Tiny as a Classifier (every dropout p = 0), the same weights
    built with timm 1.x's ``pos_drop_rate = proj_drop_rate = 0.1`` (old timm's ``drop_rate =
    0.1``), activations of ``n`` random images with their source, and the transformed images."""
    import timm

    from oodbench.models import load

    torch.manual_seed(seed)
    model = load("timm:vit_tiny_patch16_224", pretrained=False, depth=2, num_classes=5)
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, num_classes=5,
                                  pos_drop_rate=0.1, proj_drop_rate=0.1)
    reference.load_state_dict(model.model.state_dict())
    rng = np.random.default_rng(seed)
    source = ArraySource(rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), list(range(n)))
    acts = Activations(logits=np.zeros((n, 5), np.float32), labels=np.arange(n) % 5,
                       ids=np.array(source.ids), source=source,
                       source_indices=np.arange(n, dtype=np.int64))
    return model, acts, reference, transformed(model, source)
