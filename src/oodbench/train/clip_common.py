"""What the CLIP fine-tuning methods (CMA, NPOS) share around the one training loop
(:mod:`oodbench.train.loop`, which resumes, checkpoints, shows the bar and averages their
gradients over the ranks): the model check, where a run executes with its seeded epoch order,
and the epoch record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from oodbench.errors import InvalidInputError
from oodbench.extract.runtime import resolve_device
from oodbench.models.classifier import Classifier
from oodbench.models.clip import ClipClassifier
from oodbench.train import ddp
from oodbench.train.loop import epoch_order


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
        _, global_batches, local = epoch_order(self.seed, epoch, self.rows, self.batch_size,
                                               self.world, self.rank)
        return global_batches, local


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
