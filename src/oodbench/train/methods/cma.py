"""CMA fine-tuning of a CLIP classifier: every parameter of both towers, the contrastive loss of
:mod:`oodbench.losses.cma` on each batch's image and class-prompt embeddings.

Kim et al., CVPR 2025 (arXiv 2503.18817); the official training loop is
github.com/ma-kjh/CMA-OoDD ``utils/train_utils.py``. Per step, for the B images of a global
batch and their labels: image embeddings u = encode_image(x), text embeddings v of
``train_prompt.format(class name)`` for each sample's class, both L2-normalised, logits
``exp(logit_scale) * u @ v.T`` (B, B), ``loss = cma_loss(logits, lam)``. The text tower runs
once per distinct class of the batch and its embeddings are repeated (the official code encodes
one prompt per sample: the same values and the same gradient). Defaults of the paper: AdamW,
lr 1e-5, weight decay 0.1, batch 512, 10 epochs, 500 warm-up steps then cosine to 0 (the
official ``CosineAnnealingWarmupRestarts``; oodbench's warm-up is ``(s + 1) / W``), float32,
RandomResizedCrop(224, scale 0.9-1, bicubic): :data:`oodbench.train.method_defaults.CMA`, the
default of ``train(loss="cma")`` (``transform=None`` takes the recipe's augmentation).

Under ``torchrun`` every rank all-gathers the embeddings of the others with their gradients
(:func:`oodbench.train.ddp.gather_with_grad`) and computes the loss of the whole global batch,
so same-batch negatives are those of one process with the same global batch, and the averaged
gradients are that process's gradients. After training the classifier's zero-shot head is
recomputed from the fine-tuned text tower, with the official evaluation's one template "The
nice {}" (:mod:`oodbench.train.cma_head`; the loss option ``head_templates="model"`` keeps the
model's own templates); the paper scores with NegLabel.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from oodbench.data.source import Source
from oodbench.extract.loader import make_loader, to_device
from oodbench.extract.runtime import place_model, resolve_amp
from oodbench.losses.cma import CMA
from oodbench.models.classifier import Classifier
from oodbench.train import checkpoint as ckpt
from oodbench.train import cma_head, ddp
from oodbench.train.clip_common import Placement, epoch_record, require_clip
from oodbench.train.labels import select_classes
from oodbench.train.loop import Checkpoint, EpochTotals, Progress, StepResult, TrainLoop
from oodbench.train.method_registry import TrainingMethod, register
from oodbench.train.result import TrainResult

if TYPE_CHECKING:
    from oodbench.train.optim import OptimSettings


def train_cma(
    model: Classifier, source: Source, criterion: CMA, settings: OptimSettings, *,
    out: str | os.PathLike[str], seed: int = 0, resume: bool = True,
    device: str | torch.device = "auto", amp: str = "auto", num_workers: int | str = "auto",
    transform: Callable[..., torch.Tensor] | None = None, progress: bool = True,
) -> TrainResult:
    """Fine-tune a CLIP classifier with CMA (see the module docstring); the files under ``out``
    are those of :func:`oodbench.train.train`."""
    clip_model = require_clip(model, "cma")
    _, rows, _ = select_classes(source.labels, None, clip_model.num_classes,
                                f"source {source.name!r}")
    place = Placement.create(device, seed, rows, settings.batch_size)
    amp_dtype = resolve_amp(amp, place.device)
    config: dict[str, Any] = {
        "model": model.spec, "initial_weights_sha256": model.weights_digest(),
        "source": source.name, "source_fingerprint": source.fingerprint(), "n_train": int(rows.size),
        "loss": criterion.name, "loss_options": criterion.hyperparams, "trainable": "all",
        **settings.as_dict(), "seed": seed, "amp": str(amp_dtype), "world_size": place.world,
    }
    net = clip_model.clip
    place_model(model, place.device)
    params = list(net.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = settings.make_optimizer(params)
    steps = -(-rows.size // settings.batch_size)
    # the warm-up is the loss's (CMA's option); schedule, milestones and cosine floor are the
    # settings' (one scheduler for every method: none of them is dropped here)
    scheduler = settings.make_scheduler(opt, steps, warmup=criterion.warmup_steps)
    tokens = clip_model.tokenizer(
        [criterion.train_prompt.format(name) for name in clip_model.class_names]).to(place.device)
    labels = np.asarray(source.labels, dtype=np.int64)
    load = transform or model.transform
    out_dir = Path(out)
    loop: TrainLoop[Any] = TrainLoop(
        opt, scheduler, params, settings.epochs, device=place.device, amp=amp_dtype,
        world=place.world, rank=place.rank, average_gradients=True,
        checkpoint=Checkpoint(out_dir, config, net, resume=resume),
        progress=Progress(f"train {model.spec} (cma)", int(rows.size), progress))

    def begin(epoch: int) -> Any:
        _, local = place.epoch_batches(epoch)
        loader = make_loader(source, load, local, device=place.device, num_workers=num_workers)
        net.train()
        return loader

    def step(epoch: int, index: int, batch: Any) -> StepResult:
        if ddp.any_rank(batch.images is None, place.device):
            return StepResult(None, skipped=len(batch.failed))
        x = to_device(batch.images, place.device, channels_last=False)
        y = torch.from_numpy(labels[batch.indices]).to(place.device)
        classes, position = torch.unique(y, return_inverse=True)
        with loop.autocast():
            image = net.encode_image(x)  # type: ignore[operator]
            text = net.encode_text(tokens[classes])[position]  # type: ignore[operator]
        u = ddp.gather_with_grad(F.normalize(image.float(), dim=-1))
        v = ddp.gather_with_grad(F.normalize(text.float(), dim=-1))
        logits = net.logit_scale.exp() * u @ v.T  # type: ignore[operator]
        value = criterion(logits, torch.arange(len(u), device=place.device))
        loop.step(value)
        return StepResult(value.detach(), len(u), skipped=len(batch.failed))

    def record(t: EpochTotals) -> dict[str, Any]:
        return epoch_record(t.epoch, float(t.loss_sum), t.seen, t.skipped, t.seconds,
                            place.device)

    try:
        history = loop.run(begin, step, record)
    finally:
        net.eval()
    cma_head.refresh_head(clip_model, criterion.head_templates)
    model.eval()
    return TrainResult(model, out_dir, out_dir / ckpt.WEIGHTS, config, history,
                       loop.start_epoch)


register(TrainingMethod("cma", "CLIP fine-tuning with CMA's own loop (both towers, the "
                        "contrastive loss on each batch's image and class-prompt embeddings)",
                        train_cma, frozenset({"clip"})))
