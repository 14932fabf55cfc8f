"""The tiny example (examples/tiny_experiment.toml and its images) copied for experiment tests,
and models that fail or interrupt at run time."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import REPO

EXAMPLES = REPO / "examples"
TINY_TOML = EXAMPLES / "tiny_experiment.toml"


def write_tiny_experiment(folder: Path) -> Path:
    """A fresh copy of the tiny example under ``folder``: its images (``examples/data``, written
    by ``scripts/make_example_data.py``) and its experiment file; returns the file's path."""
    shutil.copytree(EXAMPLES / "data", folder / "data", dirs_exist_ok=True)
    path = folder / "tiny_experiment.toml"
    shutil.copy(TINY_TOML, path)
    return path


def n_images(split: str) -> int:
    """How many images the tiny example has under ``data/<split>``."""
    return sum(1 for _ in (EXAMPLES / "data" / split).rglob("*.png"))


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


def interrupting_cnn(**options):
    """A SmallCNN whose forward pass raises KeyboardInterrupt, as Ctrl-C would."""
    from oodbench.models.small_cnn import SmallCNN

    class Interrupting(SmallCNN):
        def forward_feature_map(self, x):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

    model = Interrupting(**options)
    model.spec = "test:interrupting_cnn"
    return model


def add_model(path: Path, factory: str) -> None:
    """Append a second 3-class model, ``factory`` of this module (``"nan_cnn"``: its cells all
    fail at run time; ``"interrupting_cnn"``: its first forward pass is a Ctrl-C)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f'\n[[models]]\nname = "{factory}"\nfactory = "tests.run.tiny:{factory}"\n'
                "options = { num_classes = 3, seed = 0 }\n")
