"""Fixtures of the tuning tests: a tiny 32 px image set and a small recipe network."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench.data.arrays import ArraySource
from oodbench.extract import extract
from oodbench.train.recipe import RECIPES
from oodbench.train.tensor_images import eval_transform

CLASSES = 4


def tiny_images(n_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class-tinted noise: class c's images are brighter in channel c % 3 (so a network can
    learn something), every image distinct."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(CLASSES), n_per_class)
    pixels = rng.integers(0, 160, size=(len(labels), 32, 32, 3))
    pixels[np.arange(len(labels)), :, :, labels % 3] += 60 + 20 * (labels // 3)[:, None, None]
    return pixels.astype(np.uint8), labels


@pytest.fixture(scope="module")
def tiny():
    """(model with a PIL transform, fit activations, id_val activations, fit source)."""
    model = RECIPES["cpu-small"].build(CLASSES, seed=0)
    model.transform = eval_transform()
    train_px, train_y = tiny_images(12, seed=1)
    val_px, val_y = tiny_images(6, seed=2)
    names = [f"c{i}" for i in range(CLASSES)]
    train_src = ArraySource(train_px, train_y, name="tiny-train", class_names=names)
    val_src = ArraySource(val_px, val_y, name="tiny-val", class_names=names)
    capture = ("logits", "features")
    fit = extract(model, train_src, capture=capture, progress=False)
    id_val = extract(model, val_src, capture=capture, progress=False)
    return model, fit, id_val, train_src
