"""Small CMA / NPOS runs on a tiny random CLIP, shared by the resume and DDP tests (also run as
a script: ``python -m tests.train._clip_run METHOD OUT EPOCHS``, under torchrun for DDP)."""

from __future__ import annotations

import sys

import numpy as np
import torch

from oodbench.data.arrays import ArraySource
from oodbench.train import TrainResult, train
from oodbench.train.optim import FINETUNE, from_options
from tests._clip_fixtures import tiny_clip

CLASSES = ["cat", "dog", "car"]

#: SGD (linear in the gradient) so that float rounding in the all-reduce stays small
SETTINGS = {
    "cma": {"loss": "cma", "loss_options": {"warmup_steps": 3}, "optimizer": "sgd", "lr": 0.05,
            "weight_decay": 0.1},
    "npos": {"loss": "npos", "optimizer": "sgd", "lr": 0.05, "weight_decay": 1e-4,
             "loss_options": {"frozen_blocks": 1, "queue_size": 4, "k": 2, "boundary": 3,
                              "samples": 16, "keep": 2, "start_epoch": 1}},
}
LAYERS = {"cma": 1, "npos": 2}


def toy_source(n: int = 31) -> ArraySource:
    """``n`` seeded random 32x32 RGB images of 3 classes (the last global batch of 12 is 7:
    split 4/3 over two ranks)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return ArraySource(images, np.arange(n) % 3, name="toy")


def model(method: str):  # type: ignore[no-untyped-def]
    return tiny_clip(CLASSES, layers=LAYERS[method])


def run(method: str, out: str, epochs: int = 3, **overrides) -> TrainResult:
    torch.set_num_threads(1)  # the same maths in every process
    optim, rest = from_options({**SETTINGS[method], "batch_size": 12, "progress": False,
                                "device": "cpu", "num_workers": 0, "epochs": epochs, **overrides},
                               FINETUNE)
    net = model(method)
    # the eval transform: these runs check the loss and the loop, not the recipe's augmentation
    return train(net, toy_source(), out=out, optim=optim, transform=net.transform, **rest)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
