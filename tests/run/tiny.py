"""Tiny image trees for experiment tests: a copy of examples/tiny_experiment.toml next to them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image

from tests.conftest import REPO

TINY_TOML = REPO / "examples" / "tiny_experiment.toml"
#: images per class folder
SIZES = {"id_train": 8, "id_test": 6, "pool": 8, "noise": 6, "stripes": 6}


def _pattern(kind: str, i: int, rng: np.random.Generator) -> np.ndarray:
    """A 12x12 RGB image: bars of a class-specific orientation, noise or stripes, plus jitter."""
    y, x = np.mgrid[0:12, 0:12]
    shapes = {
        "a": (y // 3) % 2, "b": (x // 3) % 2, "c": ((x + y) // 3) % 2,
        "d": (x > 5) ^ (y > 5), "e": ((x - 6) ** 2 + (y - 6) ** 2 < 16 + i % 5),
        "stripes": (x + 2 * y + i) % 4 < 2,
    }
    base = rng.random((12, 12)) if kind == "noise" else shapes[kind].astype(float)
    grey = np.clip(base * 0.8 + 0.2 * rng.random((12, 12)), 0, 1)
    return np.repeat((grey * 255).astype(np.uint8)[..., None], 3, axis=2)


def write_tiny_experiment(folder: Path) -> Path:
    """Write the tiny image trees under ``folder/data`` and the experiment file; return its path."""
    rng = np.random.default_rng(0)
    layout = {
        "id_train": ["a", "b", "c"], "id_test": ["a", "b", "c"], "pool": ["d", "e"],
        "noise": ["noise"], "stripes": ["stripes"],
    }
    for split, classes in layout.items():
        for cls in classes:
            out = folder / "data" / split / cls
            out.mkdir(parents=True, exist_ok=True)
            for i in range(SIZES[split]):
                Image.fromarray(_pattern(cls, i, rng)).save(out / f"{i:02d}.png")
    path = folder / "tiny_experiment.toml"
    shutil.copy(TINY_TOML, path)
    return path


def n_images(split: str) -> int:
    """How many images ``write_tiny_experiment`` writes under ``data/<split>``."""
    classes = {"id_train": 3, "id_test": 3, "pool": 2, "noise": 1, "stripes": 1}[split]
    return classes * SIZES[split]


def nan_cnn(**options):
    """A SmallCNN whose head gives NaN logits: every extraction fails at run time (a cell
    failure that no up-front check can see)."""
    import torch

    from oodbench.models.small_cnn import SmallCNN

    model = SmallCNN(**options)
    with torch.no_grad():
        model.fc.bias.fill_(float("nan"))
    model.spec = "test:nan_cnn"
    return model


def add_nan_model(path: Path) -> None:
    """Append a second model to the experiment at ``path`` whose cells all fail at run time."""
    with open(path, "a", encoding="utf-8") as f:
        f.write('\n[[models]]\nname = "nan_cnn"\nfactory = "tests.run.tiny:nan_cnn"\n'
                "options = { num_classes = 3, seed = 0 }\n")


def interrupting_cnn(**options):
    """A SmallCNN whose forward pass raises KeyboardInterrupt, as Ctrl-C would."""
    from oodbench.models.small_cnn import SmallCNN

    class Interrupting(SmallCNN):
        def forward_feature_map(self, x):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

    model = Interrupting(**options)
    model.spec = "test:interrupting_cnn"
    return model


def add_interrupting_model(path: Path) -> None:
    """Append a second model to the experiment at ``path`` whose first forward pass is a Ctrl-C."""
    with open(path, "a", encoding="utf-8") as f:
        f.write('\n[[models]]\nname = "interrupting_cnn"\nfactory = "tests.run.tiny:interrupting_cnn"\n'
                "options = { num_classes = 3, seed = 0 }\n")
