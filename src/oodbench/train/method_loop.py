"""The epoch loop shared by the CLIP fine-tuning methods (CMA, NPOS): resume, progress bar,
one checkpoint per finished epoch, the optimisation step under data parallelism.

A method gives the network to checkpoint, its optimiser and scheduler, optionally its own state
(``method_state`` / ``load_method_state``), and ``run_epoch(epoch, advance) -> record``; this
module does the rest as :func:`oodbench.train.train` does for classifiers: the files of
:mod:`oodbench.train.checkpoint`, a run with the same config and ``out`` resumes from the last
finished epoch, rank 0 writes and shows the bar.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from oodbench.errors import InvalidInputError
from oodbench.extract.runtime import resolve_device
from oodbench.models.checkpoint import load_strict
from oodbench.models.classifier import Classifier
from oodbench.models.clip import ClipClassifier
from oodbench.train import checkpoint as ckpt
from oodbench.train import ddp
from oodbench.train.progress import training_bar


def require_clip(model: Classifier, method: str) -> ClipClassifier:
    """``model`` when it is an oodbench CLIP classifier (``clip:<arch>/<tag>``), else a one-line
    ``InvalidInputError``."""
    if not isinstance(model, ClipClassifier):
        raise InvalidInputError(
            f"loss {method!r} fine-tunes a CLIP model; {getattr(model, 'spec', type(model).__name__)}"
            " is not one: load it as clip:<arch>/<tag> (e.g. clip:ViT-B-16-quickgelu/openai)")
    return model


@dataclass
class Placement:
    """Where a run executes: world size, rank, device and the epoch order of its rows."""

    world: int
    rank: int
    device: torch.device
    seed: int
    rows: np.ndarray
    batch_size: int

    @classmethod
    def create(cls, device: str | torch.device, seed: int, rows: np.ndarray,
               batch_size: int) -> Placement:
        size, rank, local_rank = ddp.world()
        dev = resolve_device(f"cuda:{local_rank}" if size > 1 and torch.cuda.is_available()
                             else device)
        return cls(size, rank, dev, seed, rows, batch_size)

    def epoch_batches(self, epoch: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(global batches, this rank's shares) of ``epoch``'s seeded order; seeds torch too."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.rows)
        torch.manual_seed(int(rng.integers(2**62)))
        global_batches = ddp.batches(order, self.batch_size)
        return global_batches, [ddp.share(b, self.world, self.rank) for b in global_batches]


def optimisation_step(value: torch.Tensor, opt: torch.optim.Optimizer,
                      params: Sequence[torch.nn.Parameter],
                      scaler: torch.amp.GradScaler | None) -> None:
    """Backward, average gradients over the ranks, step (with the fp16 scaler when given)."""
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        value.backward()
        ddp.average_gradients(params)
        opt.step()
        return
    scaler.scale(value).backward()
    ddp.average_gradients(params)
    scaler.step(opt)
    scaler.update()


def run_epochs(
    *, out: Path, config: dict[str, Any], net: torch.nn.Module, opt: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler, epochs: int, images_per_epoch: int,
    description: str, place: Placement, resume: bool, progress: bool,
    run_epoch: Callable[[int, Callable[[int, float], None]], dict[str, Any]],
    method_state: Callable[[], dict[str, torch.Tensor]] | None = None,
    load_method_state: Callable[[dict[str, torch.Tensor]], None] | None = None,
) -> list[dict[str, Any]]:
    """Resume, run the remaining epochs with a checkpoint after each; returns the history.

    ``net`` must already be on ``place.device``; the optimiser state is moved there.
    """
    history: list[dict[str, Any]] = []
    start_epoch = 0
    previous = ckpt.resume_checkpoint(out, config, resume)
    if previous is not None:
        record, weights, opt_state = previous
        load_strict(net, {k: v.to(place.device) for k, v in weights.items()},
                    origin=repr(os.fspath(out / ckpt.WEIGHTS)))
        opt.load_state_dict(opt_state)
        scheduler.load_state_dict(record["scheduler"])
        if load_method_state is not None:
            load_method_state(ckpt.read_method_state(out))
        start_epoch, history = record["epochs_done"], record["history"]
    opt.load_state_dict(opt.state_dict())  # moves optimiser state to the parameters' device
    with training_bar(description, epochs * images_per_epoch,
                      completed=start_epoch * images_per_epoch,
                      enabled=progress and place.rank == 0) as advance, \
            torch.random.fork_rng(devices=[place.device] if place.device.type == "cuda" else []):
        for epoch in range(start_epoch, epochs):
            history.append(run_epoch(epoch, advance))
            if place.rank == 0:
                ckpt.write_checkpoint(
                    out, net.state_dict(), opt.state_dict(),
                    {"config": config, "epochs_done": epoch + 1, "history": history,
                     "scheduler": scheduler.state_dict()},
                    method=None if method_state is None else method_state())
            if place.world > 1:
                dist.barrier()
    return history


def epoch_record(epoch: int, loss_sum: float, images: int, skipped: int, seconds: float,
                 device: torch.device) -> dict[str, Any]:
    """The history entry of one epoch. Every rank computes the loss of the whole global batch,
    so ``loss_sum`` (loss times batch size) and ``images`` are global already; ``skipped``
    (unreadable images of this rank's shares) is summed over the ranks."""
    failed = torch.tensor([float(skipped)], dtype=torch.float64, device=device)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(failed)
    return {"epoch": epoch + 1, "loss": loss_sum / max(images, 1), "images": images,
            "skipped": int(failed.item()), "seconds": seconds,
            "images_per_s": images / seconds if seconds > 0 else None}
