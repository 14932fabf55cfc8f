"""Pieces of a network variant restricted to some of its classes (the held-out-class protocols):
the images behind activations, labels re-indexed to the kept classes, a head cut to them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench.config import cache_dir
from oodbench.extract.activations import Activations


def images_of(acts: Activations) -> Any:
    """The source rows behind ``acts`` (in row order)."""
    assert acts.source is not None and acts.source_indices is not None
    return acts.source.subset(acts.source_indices)


def reindex(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Labels as positions in ``classes``; -1 for any other label (and for -1)."""
    labels = np.asarray(labels, dtype=np.int64)
    lookup = {int(c): i for i, c in enumerate(classes)}
    return np.array([lookup.get(int(v), -1) for v in labels], dtype=np.int64)


def without_classes(model: Any, kept: np.ndarray) -> Any:
    """A copy of ``model`` whose linear head keeps only the rows of ``kept`` (the start of a
    full variant: the other classes' outputs are gone, their knowledge in the backbone not)."""
    from oodbench.train.parts import head_module  # the training side, on use

    variant = copy.deepcopy(model)
    head: Any = head_module(variant)  # an nn.Linear
    index = torch.as_tensor(kept, dtype=torch.long)
    with torch.no_grad():
        head.weight = torch.nn.Parameter(head.weight[index].clone())
        if head.bias is not None:
            head.bias = torch.nn.Parameter(head.bias[index].clone())
    head.out_features = int(kept.size)
    variant.num_classes = int(kept.size)
    if getattr(variant, "class_names", None) is not None:
        variant.class_names = [variant.class_names[int(c)] for c in kept]
    variant.load_state_dict(variant.state_dict())  # forget a memoised weights digest
    return variant


def variant_dir() -> Path:
    """Where the variants of the held-out protocols are cached (heads, last blocks, networks
    trained from scratch)."""
    return cache_dir() / "tune" / "held_out"
