"""Fine-tuning any Classifier on a Source with a loss: ``oodbench.train.train``.

    model = oodbench.models.load("timm:resnet18", num_classes=10, pretrained=False)
    result = train(model, ImageFolder("/data/train"), loss="logitnorm", trainable="all",
                   optim=OptimSettings(epochs=30), out="runs/resnet18-logitnorm")
    oodbench.models.load("timm:resnet18", num_classes=10, weights=result.weights)  # reads it back

* **What trains**: ``"head"``, ``"last_block"`` or ``"all"`` (:mod:`oodbench.train.parts`);
  frozen modules stay in eval mode (BatchNorm statistics do not move).
* **Optimiser and schedule**: :class:`~oodbench.train.optim.OptimSettings` (SGD/AdamW, cosine
  with linear warm-up, per step).
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
  last finished epoch and ends with the same weights as an uninterrupted run.
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
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from oodbench import losses
from oodbench.data.source import Source
from oodbench.errors import InvalidInputError
from oodbench.extract.loader import make_loader, to_device
from oodbench.extract.runtime import autocast, place_model, resolve_amp, resolve_device
from oodbench.losses.base import Loss
from oodbench.models.classifier import Classifier
from oodbench.train import checkpoint as ckpt
from oodbench.train import ddp, doe, method_defaults, method_settings, unleashing_mask
from oodbench.train.cma import train_cma
from oodbench.train.hooks import Batch, LoopHooks, Run
from oodbench.train.labels import select_classes
from oodbench.train.npos import train_npos
from oodbench.train.optim import OptimSettings
from oodbench.train.optim import resolve as optim_settings
from oodbench.train.parts import network, trainable_modules
from oodbench.train.progress import training_bar
from oodbench.train.result import TrainResult

#: the training paths of losses whose ``trainer`` is not "classifier" (CLIP fine-tuning)
METHOD_TRAINERS: dict[str, Callable[..., TrainResult]] = {"cma": train_cma, "npos": train_npos}


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
    if criterion.trainer in METHOD_TRAINERS:
        return METHOD_TRAINERS[criterion.trainer](
            model, source, criterion, settings, out=out, seed=seed, resume=resume,
            device=device, amp=amp, num_workers=num_workers, transform=transform,
            progress=progress)
    if criterion.needs_outliers and outliers is None:
        raise InvalidInputError(
            f"loss {loss!r} needs an outlier source: train(..., outliers=ImageFolder(...))"
        )
    n_classes = criterion.classes_for_width(model.num_classes)
    _, rows, _ = select_classes(source.labels, None, n_classes, f"source {source.name!r}")
    modules = trainable_modules(model, trainable)
    out_dir = Path(out)
    world, rank, local_rank = ddp.world()
    dev = resolve_device(f"cuda:{local_rank}" if world > 1 and torch.cuda.is_available() else device)
    amp_dtype = resolve_amp(amp, dev)
    out_batch = outlier_batch_size or 2 * batch_size
    load = transform or recipe.transform(model.transform)
    initial_digest = model.weights_digest()
    hooks = hooks_for(criterion)
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
    steps = -(-rows.size // batch_size)
    scheduler = settings.make_scheduler(opt, steps)
    history: list[dict[str, Any]] = []
    start_epoch = 0
    previous = ckpt.resume_checkpoint(out_dir, config, resume)
    if previous is not None:
        record, weights, opt_state = previous
        hooks.load(net, weights, out_dir)
        opt.load_state_dict(opt_state)
        scheduler.load_state_dict(record["scheduler"])
        start_epoch, history = record["epochs_done"], record["history"]
    place_model(model, dev)
    opt.load_state_dict(opt.state_dict())  # moves optimiser state to the parameters' device
    runner: torch.nn.Module = model
    if world > 1:
        runner = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.index] if dev.type == "cuda" else None)
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    labels = np.asarray(source.labels, dtype=np.int64)
    with training_bar(f"train {model.spec} ({loss})", epochs * rows.size,
                      completed=start_epoch * rows.size, enabled=progress and rank == 0) as advance, \
            torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        for epoch in range(start_epoch, epochs):
            history.append(_epoch(
                runner, model, modules, criterion, opt, scheduler, scaler, source, outliers,
                rows, labels, load, epoch, settings, out_batch, seed, dev, amp_dtype,
                num_workers, world, rank, advance, hooks, params))
            if rank == 0:
                ckpt.write_checkpoint(
                    out_dir, hooks.weights(net), opt.state_dict(),
                    {"config": config, "epochs_done": epoch + 1, "history": history,
                     "scheduler": scheduler.state_dict()}, method=hooks.state())
            if world > 1:
                dist.barrier()
    hooks.finish(model)
    for p in model.parameters():
        p.requires_grad_(True)
    # the optimiser changed the weights in place: reloading them makes adapters forget a
    # memoised weights digest, so the activation cache keys the trained model as a new one
    model.load_state_dict(model.state_dict())
    model.eval()
    return TrainResult(model, out_dir, out_dir / ckpt.WEIGHTS, config, history, start_epoch)


def _epoch(runner, model, modules, criterion, opt, scheduler, scaler, source, outliers, rows,  # type: ignore[no-untyped-def]
           labels, load, epoch, settings, out_batch, seed, dev, amp_dtype, num_workers, world,
           rank, advance, hooks, params) -> dict[str, Any]:
    """One pass over the rows in this epoch's seeded order; returns the epoch's record."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(rows)
    torch.manual_seed(int(rng.integers(2**62)))  # dropout masks, loader worker seeds
    global_batches = ddp.batches(order, settings.batch_size)
    local = [ddp.share(b, world, rank) for b in global_batches]
    loader = make_loader(source, load, local, device=dev, num_workers=num_workers)
    out_iter: Any = iter([None] * len(local))
    if outliers is not None:
        out_order = rng.permutation(len(outliers))
        picks = [out_order[(np.arange(out_batch) + i * out_batch) % len(outliers)]
                 for i in range(len(local))]
        out_iter = iter(make_loader(outliers, load, [ddp.share(p, world, rank) for p in picks],
                                    device=dev, num_workers=num_workers))
    model.eval()
    for m in modules:
        m.train()
    total = torch.zeros((), dtype=torch.float64, device=dev)
    seen, skipped, start = 0, 0, time.perf_counter()
    for index, (batch, global_batch, out_batch_data) in enumerate(
            zip(loader, global_batches, out_iter)):
        skipped += len(batch.failed)
        if batch.images is None:
            scheduler.step()
            continue
        x = to_device(batch.images, dev, channels_last=False)
        y = torch.from_numpy(labels[batch.indices]).to(dev)
        x_out = (None if out_batch_data is None or out_batch_data.images is None
                 else to_device(out_batch_data.images, dev, channels_last=False))
        share = len(y) * world / len(global_batch) if world > 1 else 1.0
        value = hooks.step(Batch(runner, opt, params, x, y, x_out, epoch, index, seed, share,
                                 lambda: autocast(dev, amp_dtype)))
        if value is not None:
            scheduler.step()
            total += value.double() * len(y)
            seen += len(y)
            if advance is not None:
                advance(len(global_batch), float(total) / max(seen, 1))
            continue
        with autocast(dev, amp_dtype):
            logits = runner(x)
            out_logits = None if x_out is None else runner(x_out)
            value = criterion(logits.float(), y, None if out_logits is None else out_logits.float())
        scaled = value * share if world > 1 else value
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(scaled).backward()
            scaler.step(opt)
            scaler.update()
        else:
            scaled.backward()
            opt.step()
        scheduler.step()
        total += value.detach().double() * len(y)
        seen += len(y)
        if advance is not None:
            advance(len(global_batch), float(total) / max(seen, 1))
    counts = torch.tensor([float(total), float(seen), float(skipped)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(counts)
    seconds = time.perf_counter() - start
    loss_sum, images, failed = (float(v) for v in counts)
    return {"epoch": epoch + 1, "loss": loss_sum / max(images, 1.0), "images": int(images),
            "skipped": int(failed), "seconds": seconds,
            "images_per_s": images / seconds if seconds > 0 else None}


def hooks_for(criterion: Loss) -> LoopHooks:
    """The hooks the loss names (``Loss.hooks``), or the plain loop's."""
    table: dict[str, type[LoopHooks]] = {
        "": LoopHooks, "um": unleashing_mask.UMHooks, "umap": unleashing_mask.UMAPHooks,
        "doe": doe.DOEHooks,
    }
    return table[criterion.hooks](criterion)
