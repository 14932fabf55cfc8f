"""Short UMAP / DOE runs on the digits, shared by the resume tests (also run as a script:
``python -m tests.train._method_run OUT METHOD EPOCHS`` for the SIGKILL test)."""

from __future__ import annotations

import sys

import numpy as np

from oodbench.data.arrays import ArraySource
from oodbench.train import TrainResult
from tests.train._digits_run import run

#: DOE: one warm-up epoch, then the perturbed steps; UMAP: the default masks (keep 0.8)
OPTIONS = {"umap": {}, "doe": {"warmup": 1}}


def noise() -> ArraySource:
    """Outlier images for DOE: uniform noise 8 x 8 images, no labels."""
    rng = np.random.default_rng(0)
    return ArraySource(rng.integers(0, 256, size=(64, 8, 8), dtype=np.uint8), np.full(64, -1),
                       name="noise")


def method_run(out: str, method: str, epochs: int = 3, **overrides) -> TrainResult:
    extra = {"outliers": noise(), "outlier_batch_size": 16} if method == "doe" else {}
    return run(out, epochs=epochs, loss=method, loss_options=OPTIONS[method], optimizer="sgd",
               lr=0.05, **{**extra, **overrides})


if __name__ == "__main__":
    method_run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
