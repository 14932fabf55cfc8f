"""Fine-tuning any Classifier on a Source with a loss: ``oodbench.train.train``.

    model = oodbench.models.load("timm:resnet18", num_classes=10, pretrained=False)
    result = train(model, ImageFolder("/data/train"), loss="logitnorm", trainable="all",
                   optim=OptimSettings(epochs=30), out="runs/resnet18-logitnorm")
    oodbench.models.load("timm:resnet18", num_classes=10, weights=result.weights)  # reads it back

* **What trains**: ``"head"``, ``"last_block"`` or ``"all"`` (:mod:`oodbench.train.parts`);
  frozen modules stay in eval mode (BatchNorm statistics do not move).
* **Optimiser and schedule**: :class:`~oodbench.train.optim.OptimSettings` (SGD/AdamW, cosine
  with linear warm-up, per step).
* **The loss's training method** (:mod:`oodbench.train.method_registry`, one file each in
  :mod:`oodbench.train.methods`): its hooks into the loop below (UM, UMAP, DOE; none for a
  plain loss), or its own loop (CMA, NPOS), which gets the run; what it ``needs`` (a CLIP
  model, outliers) is checked before the run starts.
* **Each method's published recipe is its default** (:mod:`oodbench.train.method_defaults`):
  ``loss="cma"`` without ``optim=`` trains with CMA's AdamW 1e-5 / batch 512 / 10 epochs in
  float32 with its RandomResizedCrop, NPOS, DOE, UM and UMAP with theirs; other losses with
  oodbench's generic fine-tuning settings (:data:`~oodbench.train.optim.FINETUNE`).
* **Seeded data order**: epoch ``e`` visits the labelled rows in the order
  ``default_rng([seed, e]).permutation``, and dropout draws from ``torch.manual_seed`` of the same
  pair, so a run is a function of its config.
* **Checkpoints and resume**: every finished epoch writes ``model.safetensors``,
  ``optimizer.safetensors`` and ``train.json`` (config, history) under ``out``
  (:mod:`oodbench.train.checkpoint`); a run with the same config and ``out`` resumes from the
  last finished epoch and ends with the same weights as an uninterrupted run (the one training
  loop, :mod:`oodbench.train.loop`, owns the checkpoints, AMP, DDP and the progress bar).
* **No silent no-ops**: a setting the loss would leave unused (``warmup_epochs`` with ``cma``,
  an outlier source with ``ce``), or a loss option that would keep part of the method off for
  the whole run (NPOS ``start_epoch`` or DOE ``warmup`` >= ``epochs``), is a
  ``NoOpSettingError`` before anything is read or written (:mod:`oodbench.train.method_settings`).
* **AMP** on CUDA (``amp="auto"``: bfloat16, or float16 with a gradient scaler).
* **Multi-GPU / multi-node** through ``torchrun`` and PyTorch DDP: launched by ``torchrun``
  (``WORLD_SIZE`` > 1), ``train`` joins the process group (NCCL on CUDA, gloo on CPU), each
  rank takes its slice of every global batch and DDP averages the gradients; the loss of a rank
  is rescaled by its share of the global batch, so for per-sample losses (ce, logitnorm, mm,
  oe, mos) the update equals the single-process one with the same global ``batch_size``. HEM
  and Dice are batch-level losses (a mean over the batch's erring samples, per-class sums over
  the batch), for which each rank sees only its slice, as BatchNorm does. Rank 0 writes the
  checkpoints and shows the progress bar.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from oodbench import losses
from oodbench.data.source import Source
from oodbench.errors import InvalidInputError
from oodbench.extract.loader import make_loader, to_device
from oodbench.extract.runtime import place_model, resolve_amp, resolve_device
from oodbench.losses.base import Loss
from oodbench.models.classifier import Classifier
from oodbench.train import checkpoint as ckpt
from oodbench.train import ddp, method_defaults, method_settings
from oodbench.train.clip_common import require_clip
from oodbench.train.hooks import Batch, LoopHooks, Run
from oodbench.train.labels import select_classes
from oodbench.train.loop import (
    Checkpoint,
    EpochTotals,
    Progress,
    StepResult,
    TrainLoop,
    data_parallel,
    epoch_order,
)
from oodbench.train.method_registry import method_of
from oodbench.train.optim import OptimSettings
from oodbench.train.optim import resolve as optim_settings
from oodbench.train.parts import network, trainable_modules
from oodbench.train.result import TrainResult


def train(
    model: Classifier,
    source: Source,
    *,
    out: str | os.PathLike[str],
    loss: str = "ce",
    loss_options: Mapping[str, Any] | None = None,
    trainable: str = "all",
    optim: OptimSettings | None = None,
    seed: int = 0,
    resume: bool = True,
    device: str | torch.device = "auto",
    amp: str | None = None,
    num_workers: int | str = "auto",
    transform: Callable[..., torch.Tensor] | None = None,
    outliers: Source | None = None,
    outlier_batch_size: int | None = None,
    progress: bool = True,
    **deprecated: Any,
) -> TrainResult:
    """Fine-tune ``model`` on the labelled images of ``source`` (see the module docstring).

    Args:
        model: from ``oodbench.models.load(...)`` or ``wrap(...)``; its head must have one
            output per class of ``source`` (plus one per group for ``loss="mos"``).
        source: ImageFolder / ImageList / ArraySource ...; rows labelled -1 are left out.
        out: folder for the checkpoints (created); resumed from when it holds this config.
        loss, loss_options: a loss of :func:`oodbench.losses.available` and its options.
        trainable: ``"head"``, ``"last_block"`` or ``"all"``.
        optim: the optimiser settings (:class:`OptimSettings`; ``batch_size`` is global, over
            all DDP ranks); default the loss's published recipe
            (:func:`oodbench.train.method_defaults.defaults_for`), else
            :data:`~oodbench.train.optim.FINETUNE` (10 epochs, batch 128, SGD lr 0.1, cosine).
            The old keywords ``epochs=``, ``batch_size=``, ``lr=``, ... still work (changing
            that default) with a ``DeprecatedArgumentWarning``.
        resume: continue from ``out`` when it holds a checkpoint of the same config
            (``False``: start again and overwrite it).
        amp: ``"auto"`` (bf16/fp16 autocast on CUDA, off on CPU), ``"off"``, ``"bf16"``,
            ``"fp16"``; default the recipe's (CMA: ``"off"``), else ``"auto"``.
        transform: PIL image -> tensor for training (e.g. with augmentation); default the
            recipe's augmentation (CMA's RandomResizedCrop) around the model's normalisation,
            else the model's own eval transform.
        outliers: outlier images for losses that need them (``oe``); each step reads
            ``outlier_batch_size`` of them (default the recipe's, else ``2 * batch_size``).
    """
    recipe = method_defaults.defaults_for(loss)
    settings = optim_settings(optim, recipe.optim, deprecated, "train")
    epochs, batch_size = settings.epochs, settings.batch_size
    criterion = losses.create(loss, **dict(loss_options or {}))
    method_settings.check(criterion, method_settings.run_settings(
        settings, trainable=trainable, outliers=outliers, outlier_batch_size=outlier_batch_size))
    amp = recipe.amp if amp is None else amp
    outlier_batch_size = outlier_batch_size or recipe.outlier_batch_size
    method = method_of(criterion)
    if "clip" in method.needs:
        require_clip(model, loss)
    if ("outliers" in method.needs or criterion.needs_outliers) and outliers is None:
        raise InvalidInputError(
            f"loss {loss!r} needs an outlier source: train(..., outliers=ImageFolder(...))"
        )
    load = transform or recipe.transform(model.transform)
    if method.own_loop:  # a method with a loop of its own (CLIP fine-tuning)
        result: TrainResult = method.behaviour(
            model, source, criterion, settings, out=out, seed=seed, resume=resume,
            device=device, amp=amp, num_workers=num_workers, transform=load,
            progress=progress)
        return result
    n_classes = criterion.classes_for_width(model.num_classes)
    _, rows, _ = select_classes(source.labels, None, n_classes, f"source {source.name!r}")
    modules = trainable_modules(model, trainable)
    out_dir = Path(out)
    world, rank, local_rank = ddp.world()
    dev = resolve_device(f"cuda:{local_rank}" if world > 1 and torch.cuda.is_available() else device)
    amp_dtype = resolve_amp(amp, dev)
    out_batch = outlier_batch_size or 2 * batch_size
    initial_digest = model.weights_digest()
    hooks: LoopHooks = method.behaviour(criterion)
    method_config = hooks.prepare(Run(model, modules, source, rows, batch_size, seed, dev,
                                      num_workers, world, rank))
    config: dict[str, Any] = {
        "model": model.spec, "initial_weights_sha256": initial_digest,
        "source": source.name, "source_fingerprint": source.fingerprint(), "n_train": int(rows.size),
        "loss": loss, "loss_options": criterion.hyperparams, "trainable": trainable,
        **settings.as_dict(), "seed": seed, "amp": str(amp_dtype), "world_size": world,
        "outliers": None if outliers is None else outliers.fingerprint(),
        "outlier_batch_size": None if outliers is None else out_batch, **method_config,
    }
    net = network(model)
    for p in model.parameters():
        p.requires_grad_(False)
    params = list({id(p): p for m in modules for p in m.parameters()}.values())
    for p in params:
        p.requires_grad_(True)
    params = hooks.parameters(params)
    opt = settings.make_optimizer(params)
    scheduler = settings.make_scheduler(opt, -(-rows.size // batch_size))
    loop: TrainLoop[Any] = TrainLoop(
        opt, scheduler, params, epochs, device=dev, amp=amp_dtype, world=world, rank=rank,
        checkpoint=Checkpoint(out_dir, config, net, resume, weights=lambda: hooks.weights(net),
                              state=lambda: hooks.state(),
                              load=lambda weights: hooks.load(net, weights, out_dir)),
        progress=Progress(f"train {model.spec} ({loss})", int(rows.size), progress))
    loop.resume()  # the checkpoint's weights into the network before it moves
    place_model(model, dev)
    run = _Run(model, data_parallel(model, dev, world), modules, criterion, hooks, loop, source,
               outliers, rows, np.asarray(source.labels, dtype=np.int64), load, batch_size,
               out_batch, seed, num_workers)
    history = loop.run(lambda epoch: _epoch(run, epoch), run.step, run.record)
    hooks.finish(model)
    for p in model.parameters():
        p.requires_grad_(True)
    # the optimiser changed the weights in place: reloading them makes adapters forget a
    # memoised weights digest, so the activation cache keys the trained model as a new one
    model.load_state_dict(model.state_dict())
    model.eval()
    return TrainResult(model, out_dir, out_dir / ckpt.WEIGHTS, config, history, loop.start_epoch)


@dataclass
class _Run:
    """The classifier loop's hooks into :class:`~oodbench.train.loop.TrainLoop` (with
    :func:`_epoch`, the start of each epoch): the step (the loss, or the method's own step)
    and the epoch record."""

    model: Classifier
    runner: torch.nn.Module  # the model, or its DDP wrapper under torchrun
    modules: list[torch.nn.Module]
    criterion: Loss
    hooks: LoopHooks
    loop: TrainLoop[Any]
    source: Source
    outliers: Source | None
    rows: np.ndarray
    labels: np.ndarray
    load: Callable[..., torch.Tensor]
    batch_size: int
    out_batch: int
    seed: int
    num_workers: int | str

    def step(self, epoch: int, index: int, item: Any) -> StepResult:
        """One batch: the method's step when its hooks take it (DOE), else the loss's."""
        batch, global_batch, out_data = item
        if batch.images is None:
            return StepResult(None, skipped=len(batch.failed))
        loop, dev = self.loop, self.loop.device
        x = to_device(batch.images, dev, channels_last=False)
        y = torch.from_numpy(self.labels[batch.indices]).to(dev)
        x_out = (None if out_data is None or out_data.images is None
                 else to_device(out_data.images, dev, channels_last=False))
        share = len(y) * loop.world / len(global_batch) if loop.world > 1 else 1.0
        value = self.hooks.step(Batch(self.runner, loop.optimizer, loop.params, x, y, x_out,
                                      epoch, index, self.seed, share, loop.autocast,
                                      loop.scaler))
        if value is None:
            with loop.autocast():
                logits = self.runner(x)
                out_logits = None if x_out is None else self.runner(x_out)
                value = self.criterion(logits.float(), y,
                                       None if out_logits is None else out_logits.float())
            loop.step(value * share if loop.world > 1 else value)
        return StepResult(value.detach(), len(y), images=len(global_batch),
                          skipped=len(batch.failed))

    def record(self, t: EpochTotals) -> dict[str, Any]:
        """The epoch's history entry, summed over the ranks."""
        counts = torch.tensor([float(t.loss_sum), float(t.seen), float(t.skipped)],
                              dtype=torch.float64)
        if self.loop.world > 1:
            dist.all_reduce(counts)
        loss_sum, images, failed = (float(v) for v in counts)
        return {"epoch": t.epoch + 1, "loss": loss_sum / max(images, 1.0), "images": int(images),
                "skipped": int(failed), "seconds": t.seconds,
                "images_per_s": images / t.seconds if t.seconds > 0 else None}


def _epoch(run: _Run, epoch: int) -> Iterable[Any]:
    """This epoch's batches: (ID batch, its global batch, outlier batch or None), in the
    order ``default_rng([seed, epoch])`` draws; torch seeded from the same generator."""
    world, rank, dev = run.loop.world, run.loop.rank, run.loop.device
    rng, global_batches, local = epoch_order(run.seed, epoch, run.rows, run.batch_size,
                                             world, rank)
    loader = make_loader(run.source, run.load, local, device=dev,
                         num_workers=run.num_workers)
    out_iter: Any = iter([None] * len(local))
    if run.outliers is not None:
        n_out, size = len(run.outliers), run.out_batch
        out_order = rng.permutation(n_out)
        picks = [out_order[(np.arange(size) + i * size) % n_out] for i in range(len(local))]
        out_iter = iter(make_loader(run.outliers, run.load,
                                    [ddp.share(p, world, rank) for p in picks], device=dev,
                                    num_workers=run.num_workers))
    run.model.eval()
    for m in run.modules:
        m.train()
    return zip(loader, global_batches, out_iter)

