"""A small training run on the digits, shared by the resume and DDP tests (also run as a
script: ``python -m tests.train._digits_run OUT [EPOCHS]``, under torchrun for DDP)."""

from __future__ import annotations

import sys

import torch

from oodbench.data.digits import DigitsSource
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import TrainResult, train
from oodbench.train.optim import FINETUNE, from_options

SETTINGS = {"batch_size": 48, "lr": 3e-3, "optimizer": "adamw", "progress": False,
            "device": "cpu"}


#: SGD is linear in the gradient, so float rounding in the all-reduce stays at float rounding
#: (Adam divides by sqrt of tiny second moments and would magnify it); no dropout masks
DDP_SETTINGS = {"dropout": 0.0, "optimizer": "sgd", "lr": 0.05}


def run(out: str, epochs: int = 3, **overrides) -> TrainResult:
    torch.set_num_threads(1)  # the same maths in every process
    model = SmallCNN(6, seed=0, dropout=overrides.pop("dropout", 0.25))
    optim, rest = from_options({**SETTINGS, "epochs": epochs, **overrides}, FINETUNE)
    return train(model, DigitsSource(range(6)), out=out, optim=optim, **rest)


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), **(DDP_SETTINGS if "--ddp-check" in sys.argv else {}))
