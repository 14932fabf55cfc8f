"""A fast training recipe for small (32 px) images: one loop, the same on a CPU and a GPU.

    data = tensor_images(ImageFolder("cifar10-train")).split(ID_CLASSES)[0]
    result = train_recipe(RECIPES["cpu-small"], data, loss="logitnorm", seed=0, out="runs/x")
    logits = predict_logits(result.model, test_data)        # numpy (N, classes)

What makes it fast, and what every loss shares:

* **Images in memory** as one uint8 tensor (:mod:`oodbench.train.tensor_images`), moved to
  the device once; each batch is cropped, flipped and normalised there by one tensor gather
  (no PIL, no DataLoader workers).
* **Network**: a residual network for 32 px images in channels-last memory format: He et
  al.'s CIFAR ResNet (:mod:`oodbench.models.cifar_resnet`, ``network="resnet"``) or Page's
  ResNet-9, the network of the fast CIFAR-10 recipes (:mod:`oodbench.models.cifar_resnet9`,
  ``network="resnet9"``). Mixed precision by ``amp``: ``"auto"`` is bfloat16/float16
  autocast on CUDA (float16 with the grad scaler of the one training loop,
  :mod:`oodbench.train.loop`, which runs every epoch) and float32 on the CPU; ``"bf16"`` is bfloat16 autocast on either (on a
  CPU with native bfloat16 dot products, AVX512-BF16 or AMX, 1.7 times the float32 images/s
  of the same network here). Evaluation (:func:`predict_logits`) is always float32.
* **Optimiser and schedule**: SGD with momentum 0.9 and weight decay
  (``Recipe.optim``, an :class:`~oodbench.train.optim.OptimSettings`), learning rate per step
  by :func:`~oodbench.train.optim.lr_factor`: a linear warm-up over the first
  ``warmup_fraction`` of the steps, then a cosine decay to 0 (one cycle). Nothing in the
  recipe depends on the loss: every loss of a study trains under the same recipe.
* **Seeded**: epoch ``e`` visits the images in ``randperm`` order of a generator seeded with
  ``(seed, e)``, which also draws the crops and flips; the initial weights depend on ``seed``.
* **Resumable**: with ``out``, every finished epoch writes a checkpoint
  (:mod:`oodbench.train.checkpoint`); a run with the same config resumes from the last one.

The recipe itself (:class:`Recipe`: network, augmentation, optimiser settings) and its named
presets :data:`RECIPES` are data, in :mod:`oodbench.train.recipe_config` (no torch: what
validating a ``train = {recipe = NAME}`` tuning table reads); this module re-exports them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import losses
from oodbench.errors import InvalidInputError
from oodbench.extract.runtime import resolve_amp, resolve_device
from oodbench.models.cifar_resnet import CifarResNet
from oodbench.models.cifar_resnet9 import CifarResNet9
from oodbench.train.loop import Checkpoint, EpochTotals, StepResult, TrainLoop, batch_slices
from oodbench.train.recipe_config import RECIPES, Recipe
from oodbench.train.tensor_images import TensorImages, augment, normalise

#: ``Recipe`` and ``RECIPES`` are :mod:`oodbench.train.recipe_config`'s, re-exported here
__all__ = ["RECIPES", "Recipe", "RecipeResult", "check_inputs", "predict_logits", "run_key",
           "train_recipe"]


@dataclass(frozen=True)
class RecipeResult:
    """The trained network (eval mode), the run's config and its per-epoch history."""

    model: CifarResNet | CifarResNet9
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def train_seconds(self) -> float:
        return float(sum(h["seconds"] for h in self.history))

    @property
    def train_cpu_seconds(self) -> float:
        """This process's CPU time over the epochs (``time.process_time``: what the scheduler
        gave to other processes, or a SIGSTOP, does not count)."""
        return float(sum(h.get("cpu_seconds", float("nan")) for h in self.history))


def check_inputs(recipe: Recipe, data: TensorImages, loss: str,
                 loss_options: Mapping[str, Any] | None = None) -> losses.Loss:
    """Every check that can fail before training (one-line ``OodbenchError``s); the loss."""
    criterion = losses.create(loss, **dict(loss_options or {}))  # unknown name: did-you-mean
    if criterion.needs_outliers:
        raise InvalidInputError(
            f"loss {loss!r} needs outlier images, which the small-image recipe does not feed; "
            "use oodbench.train.train(..., outliers=...)")
    h, w = data.size
    if (h, w) != (recipe.image_size, recipe.image_size):
        raise InvalidInputError(
            f"{data.name}: the recipe is for {recipe.image_size} px images but the data is "
            f"{h} x {w} px; down-sample it (tensor_images(source, size={recipe.image_size})) or "
            "use a recipe for that size")
    classes = len(data.class_names)
    present = set(data.labels.unique().tolist())
    if classes < 2 or -1 in present or len(present) < classes:
        raise InvalidInputError(
            f"{data.name}: training needs images of every one of its >= 2 classes and no "
            f"unlabelled rows; it has {len(present - {-1})} of {classes} classes"
            + (" and rows labelled -1" if -1 in present else ""))
    return criterion


def run_key(recipe: Recipe, data: TensorImages, loss: str, loss_options: Mapping[str, Any],
            seed: int) -> str:
    """A digest of everything that decides the trained weights (a run's cache name)."""
    ident = {"recipe": recipe.as_dict(), "data": data.fingerprint(), "loss": loss,
             "loss_options": dict(loss_options), "seed": seed}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def _generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))


def train_recipe(
    recipe: Recipe,
    data: TensorImages,
    *,
    loss: str = "ce",
    loss_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    device: str | torch.device = "auto",
    out: str | os.PathLike[str] | None = None,
    log: Any = None,
) -> RecipeResult:
    """Train a fresh network of ``recipe`` on ``data`` with ``loss`` (see the module doc).

    Args:
        log: optional ``callable(str)`` that receives one line per finished epoch.
    """
    criterion = check_inputs(recipe, data, loss, loss_options)
    dev = resolve_device(device)
    amp_dtype = resolve_amp(recipe.amp, dev)
    model = recipe.build(len(data.class_names), seed)
    config = {"recipe": recipe.as_dict(), "data": data.name, "data_fingerprint":
              data.fingerprint(), "n_train": len(data), "loss": loss,
              "loss_options": criterion.hyperparams, "seed": seed, "amp": str(amp_dtype)}
    settings = recipe.optim
    opt = settings.make_optimizer(model.parameters())
    scheduler = settings.make_scheduler(opt, -(-len(data) // settings.batch_size))
    callbacks = [] if log is None else [lambda h: log(
        f"  epoch {h['epoch']}/{recipe.epochs}: loss {h['loss']:.4f}, train acc "
        f"{h['train_accuracy']:.3f}, {h['images_per_s']:.0f} images/s")]
    loop: TrainLoop[torch.Tensor] = TrainLoop(
        opt, scheduler, list(model.parameters()), recipe.epochs, device=dev, amp=amp_dtype,
        checkpoint=None if out is None else Checkpoint(Path(out), config, model),
        callbacks=callbacks)
    loop.resume()  # the checkpoint's weights into the network before it moves
    model.to(dev)
    if recipe.channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-arg]
    images, labels = data.images.to(dev), data.labels.to(dev)
    correct = torch.zeros((), dtype=torch.int64, device=dev)
    gens: dict[int, torch.Generator] = {}

    def begin(epoch: int) -> Iterator[torch.Tensor]:
        correct.zero_()
        gens.clear()
        gens[epoch], batches = _epoch(model, images, recipe, seed, dev, epoch)
        return batches

    def step(epoch: int, index: int, rows: torch.Tensor) -> StepResult:
        nonlocal correct
        x = augment(images[rows], gens[epoch], pad=recipe.pad, flip=recipe.flip,
                    mean=recipe.mean, std=recipe.std)
        y = labels[rows]
        with loop.autocast():
            logits = model(x)
        value = criterion(logits.float(), y)
        loop.step(value)
        correct += (logits.detach().argmax(1) == y).sum()
        return StepResult(value.detach(), len(y))

    def record(t: EpochTotals) -> dict[str, Any]:
        return {"epoch": t.epoch + 1, "loss": float(t.loss_sum) / t.seen,
                "train_accuracy": int(correct) / t.seen, "images": t.seen,
                "seconds": t.seconds, "cpu_seconds": t.cpu_seconds,
                "images_per_s": t.seen / t.seconds, "lr_end": float(scheduler.get_last_lr()[0])}

    history = loop.run(begin, step, record)
    model.load_state_dict(model.state_dict())  # forget the memoised digest of the old weights
    return RecipeResult(model.eval(), config, history)


def _epoch(model: torch.nn.Module, images: torch.Tensor, recipe: Recipe, seed: int,
           dev: torch.device, epoch: int) -> tuple[torch.Generator, Iterator[torch.Tensor]]:
    """The start of epoch ``epoch``: the network in train mode; the epoch's generator (seeded
    with ``(seed, epoch)``) and the batches of rows in the order it draws (it then draws each
    batch's crops and flips)."""
    model.train()
    gen = _generator(seed, epoch)
    order = torch.randperm(len(images), generator=gen).to(dev)
    return gen, batch_slices(order, recipe.batch_size)


@torch.no_grad()
def predict_logits(model: CifarResNet | CifarResNet9, data: TensorImages, recipe: Recipe,
                   device: str | torch.device = "auto") -> np.ndarray:
    """Logits (N, classes) float32 of ``model`` (eval mode) on ``data``, in batches.

    Always in float32, whatever the recipe's training precision: bfloat16 logits keep about
    three significant digits, so many samples would tie on MSP or max-logit and the OOD
    metrics would measure the rounding. Inference is a small share of a run's cost.
    """
    if data.size != (recipe.image_size, recipe.image_size):
        raise InvalidInputError(
            f"{data.name}: {data.size[0]} x {data.size[1]} px images for a recipe of "
            f"{recipe.image_size} px; down-sample them (tensor_images(..., size=...))")
    dev = resolve_device(device)
    model.eval().to(dev)
    out = []
    for i in range(0, len(data), recipe.eval_batch_size):
        x = normalise(data.images[i : i + recipe.eval_batch_size].to(dev), recipe.mean,
                      recipe.std, channels_last=recipe.channels_last)
        out.append(model(x).float().cpu())
    return torch.cat(out).numpy()
