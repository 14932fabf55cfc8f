"""Unleashing Mask (loss ``um``) in the training loop: the loss constraint ``L_hat``
estimated before the first epoch. The loss and its formula: :mod:`oodbench.losses.um`; UMAP,
which adds learned weight masks: :mod:`oodbench.train.methods.umap`.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from oodbench.extract.loader import make_loader, to_device
from oodbench.train import masks
from oodbench.train.hooks import LoopHooks, Run
from oodbench.train.method_registry import TrainingMethod, register


def estimate_constraint(run: Run, keep: float) -> float:
    """``L_hat``: the mean cross-entropy over the training rows of a copy of ``run.model`` with
    random top-k masks keeping ``keep`` of every conv / linear weight, in eval mode.

    As the official ``estimate_loss.py`` (``modifier``: eval mode, the average of the batch
    losses weighted by batch size), on the images through the model's own eval transform (not a
    training augmentation, whose random draws would make the estimate, which is part of the
    run's config, differ between a run and its resumption). The masks come from ``run.seed``, so
    the estimate is a function of the config; under DDP each rank scores its share and the sums
    are reduced.
    """
    model = copy.deepcopy(run.model)
    masks.attach([model], keep, run.seed, "loss constraint estimate")
    model.to(run.device).eval()
    rows = np.array_split(np.asarray(run.rows), run.world)[run.rank]
    batches = [rows[i : i + run.batch_size] for i in range(0, len(rows), run.batch_size)]
    total = torch.zeros(2, dtype=torch.float64, device=run.device)
    with torch.no_grad():
        for batch in make_loader(run.source, run.model.transform, batches, device=run.device,
                                 num_workers=run.num_workers):
            if batch.images is None:
                continue
            labels = torch.as_tensor(np.asarray(run.source.labels)[batch.indices], device=run.device)
            logits = model(to_device(batch.images, run.device, channels_last=False)).float()
            total[0] += F.cross_entropy(logits, labels.long(), reduction="sum").double()
            total[1] += len(labels)
    if run.world > 1:
        dist.all_reduce(total)
    return float(total[0] / total[1].clamp(min=1.0))


class UMHooks(LoopHooks):
    """UM: estimate ``L_hat`` before training when the loss was given ``constraint="estimate"``."""

    def prepare(self, run: Run) -> dict[str, Any]:
        criterion: Any = self.criterion
        if criterion.constraint != "estimate":
            return {"loss_constraint": "given"}
        criterion.constraint = estimate_constraint(run, criterion.estimate_keep)
        return {"loss_constraint": f"estimated (random masks keeping {criterion.estimate_keep})"}


register(TrainingMethod("um", "Unleashing Mask (loss um): the loss held at a constraint estimated "
                        "before the first epoch", UMHooks))
