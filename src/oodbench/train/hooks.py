"""What a training method adds to :func:`oodbench.train.train`'s classifier loop.

Most losses need nothing but ``loss(logits, labels, outlier_logits)``. A training-time method
(Unleashing Mask, UMAP, DOE) also prepares the model before the first epoch, chooses what
trains, keeps state of its own across epochs, or replaces the optimisation step. Such a method
is a :class:`LoopHooks` subclass in a file of :mod:`oodbench.train.methods`, registered as a
:class:`~oodbench.train.method_registry.TrainingMethod`; its loss names it in ``Loss.method``, and
the loop then calls, in this order:

    prepare(run)            before the config is written (UM: estimate the loss constraint;
                            UMAP: put masks on the weights); returns config entries to record
    parameters(params)      the parameters the optimiser updates (UMAP: the mask scores)
    load(net, weights, out) resume: restore the network and the method's state
    step(batch) -> loss     the batch's optimisation steps (DOE, through
                            :func:`oodbench.train.loop.optimise`), or None for the loop's own
    weights(net), state()   what each epoch's checkpoint holds (model / method.safetensors)
    finish(model)           after the last epoch (UMAP: bake the masks into the weights)

Everything else (data order, checkpoints, resume, DDP, AMP, progress) stays the loop's
(:mod:`oodbench.train.finetune` on :class:`oodbench.train.loop.TrainLoop`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench.data.source import Source
from oodbench.losses.base import Loss
from oodbench.models.checkpoint import load_strict
from oodbench.models.classifier import Classifier


@dataclass
class Run:
    """What :meth:`LoopHooks.prepare` may use: the model and its training data and placement."""

    model: Classifier
    modules: list[torch.nn.Module]
    source: Source
    rows: np.ndarray
    batch_size: int
    seed: int
    device: torch.device
    num_workers: int | str
    world: int
    rank: int


@dataclass
class Batch:
    """One optimisation step's inputs, for a method that takes the step itself."""

    runner: torch.nn.Module
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    x: torch.Tensor
    y: torch.Tensor
    x_out: torch.Tensor | None
    epoch: int
    index: int
    seed: int
    share: float  # this rank's share of the global batch times the world size (1 without DDP)
    autocast: Callable[[], Any]
    scaler: torch.amp.GradScaler | None = None  # the loop's float16 grad scaler


class LoopHooks:
    """The default: the plain loop (every hook is the identity or does nothing)."""

    def __init__(self, criterion: Loss):
        self.criterion = criterion

    def prepare(self, run: Run) -> dict[str, Any]:
        return {}

    def parameters(self, params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        return params

    def load(self, net: torch.nn.Module, weights: dict[str, torch.Tensor], out: Path) -> None:
        from oodbench.train.checkpoint import WEIGHTS

        load_strict(net, weights, origin=repr(os.fspath(out / WEIGHTS)))

    def step(self, batch: Batch) -> torch.Tensor | None:
        return None

    def weights(self, net: torch.nn.Module) -> dict[str, torch.Tensor]:
        return net.state_dict()

    def state(self) -> dict[str, torch.Tensor] | None:
        return None

    def finish(self, model: Classifier) -> None:
        return None
