"""A fast training recipe for small (32 px) images: one loop, the same on a CPU and a GPU.

    data = tensor_images(ImageFolder("cifar10-train")).split(ID_CLASSES)[0]
    result = train_recipe(RECIPES["cpu-small"], data, loss="logitnorm", seed=0, out="runs/x")
    logits = predict_logits(result.model, test_data)        # numpy (N, classes)

What makes it fast, and what every loss shares:

* **Images in memory** as one uint8 tensor (:mod:`oodbench.train.tensor_images`), moved to
  the device once; each batch is cropped, flipped and normalised there by one tensor gather
  (no PIL, no DataLoader workers).
* **Network**: a CIFAR ResNet (:mod:`oodbench.models.cifar_resnet`), in channels-last memory
  format, bfloat16/float16 autocast on CUDA.
* **Optimiser and schedule**: SGD with momentum 0.9 and weight decay
  (``Recipe.optim``, an :class:`~oodbench.train.optim.OptimSettings`), learning rate per step
  by :func:`~oodbench.train.optim.lr_factor`: a linear warm-up over the first
  ``warmup_fraction`` of the steps, then a cosine decay to 0 (one cycle). Nothing in the
  recipe depends on the loss: every loss of a study trains under the same recipe.
* **Seeded**: epoch ``e`` visits the images in ``randperm`` order of a generator seeded with
  ``(seed, e)``, which also draws the crops and flips; the initial weights depend on ``seed``.
* **Resumable**: with ``out``, every finished epoch writes a checkpoint
  (:mod:`oodbench.train.checkpoint`); a run with the same config resumes from the last one.

The presets in :data:`RECIPES` are data:

* ``cpu-resnet8``, the CPU study of ``benchmarks/loss_table.py``: the smallest member of the
  family (widths 16/32/64, one block per stage, ResNet-8), 10 epochs over all 30,000 training
  images of the 6 ID classes, batch 64, peak lr 0.05 (0.1 per 128 images, He et al.'s CIFAR
  value, scaled linearly to the batch), 15 % warm-up then cosine. Why this size: one idle core
  of the 2-core study machine trains this network at about 350 images per CPU-second (1
  thread, batch 64; batch 128 and 2 threads per process were slower per CPU-second, ResNet-20
  and widths 32/64/128 about 2.8 times slower), so 5 losses x 3 seeds x 10 epochs x 30,000
  images is about 3.6 CPU-hours: under 2 hours on two idle cores with one worker per core.
  Ten epochs is the most that fits; it is a training budget chosen for CE's accuracy on the
  ID classes and is the same for every loss.
* ``cpu-small``, a smoke-test size of the same network: 1 epoch (examples, quick checks).
* ``resnet20``, the paper network of He et al. (2016) at a CPU-sized epoch count.
* ``gpu-resnet18``, the full-scale
configuration: ResNet-18, 200 epochs, batch 128, lr 0.1, weight decay 5e-4 (the CIFAR-10
schedule length and optimiser of LogitNorm, Wei et al., ICML 2022, Sec. 4.1, and of their
code's ``train.py``; the decay here is the recipe's cosine, not their steps at epochs 80 and
140, and there is no dropout).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import losses
from oodbench.errors import InvalidInputError
from oodbench.extract.runtime import autocast, resolve_amp, resolve_device
from oodbench.models.checkpoint import load_strict
from oodbench.models.cifar_resnet import CifarResNet
from oodbench.train import checkpoint as ckpt
from oodbench.train.optim import RECIPE, OptimSettings, from_options
from oodbench.train.tensor_images import CIFAR_MEAN, CIFAR_STD, TensorImages, augment, normalise

#: the optimiser fields a recipe records under their own names (its ``as_dict`` and run keys)
_RECIPE_OPTIM = ("epochs", "batch_size", "lr", "weight_decay", "warmup_fraction")


@dataclass(frozen=True)
class Recipe:
    """Everything that decides a small-image training run except the loss, data and seed: the
    network's shape, the augmentation, and the optimiser settings ``optim`` (an
    :class:`~oodbench.train.optim.OptimSettings`: SGD, cosine, warm-up as a fraction of the
    steps; default :data:`~oodbench.train.optim.RECIPE`)."""

    widths: tuple[int, ...] = (16, 32, 64)
    blocks: tuple[int, ...] = (3, 3, 3)
    image_size: int = 32
    optim: OptimSettings = RECIPE
    pad: int = 4
    flip: bool = True
    mean: tuple[float, float, float] = CIFAR_MEAN
    std: tuple[float, float, float] = CIFAR_STD
    channels_last: bool = True
    amp: str = "auto"
    eval_batch_size: int = 1000

    def __post_init__(self) -> None:
        if (self.optim.optimizer, self.optim.schedule, self.optim.warmup_epochs) != (
                "sgd", "cosine", 0):
            raise InvalidInputError(
                "the small-image recipe trains with SGD and a cosine schedule warmed up by "
                "warmup_fraction; give OptimSettings(optimizer='sgd', schedule='cosine', "
                f"warmup_epochs=0, ...); got {self.optim}")
        if self.image_size < 8 or self.pad < 0:
            raise InvalidInputError(
                f"image_size must be >= 8 and pad >= 0; got {self.image_size}, {self.pad}")

    # read-only views of ``optim`` (the names a recipe's runs record them under)
    @property
    def epochs(self) -> int:
        return self.optim.epochs

    @property
    def batch_size(self) -> int:
        return self.optim.batch_size

    @property
    def lr(self) -> float:
        return self.optim.lr

    @property
    def weight_decay(self) -> float:
        return self.optim.weight_decay

    def scaled(self, **changes: Any) -> Recipe:
        """A copy with some fields changed (e.g. ``epochs=``, ``lr=``: fields of ``optim``
        change it; the others are the recipe's own)."""
        optim, own = from_options(changes, self.optim)
        return replace(self, optim=optim, **own)

    def as_dict(self) -> dict[str, Any]:
        """The recipe for a run's record and key: its own fields and ``optim``'s
        ``_RECIPE_OPTIM`` (flat, as before ``optim`` held them, so earlier runs' keys match)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "optim"}
        out.update({k: getattr(self.optim, k) for k in _RECIPE_OPTIM})
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def network(self, num_classes: int, seed: int) -> CifarResNet:
        return CifarResNet(num_classes, widths=self.widths, blocks=self.blocks, seed=seed)


#: the presets (see the module docstring)
RECIPES: dict[str, Recipe] = {
    "cpu-resnet8": Recipe(widths=(16, 32, 64), blocks=(1, 1, 1), optim=OptimSettings(
        epochs=10, batch_size=64, lr=0.05, warmup_fraction=0.15)),
    "cpu-small": Recipe(widths=(16, 32, 64), blocks=(1, 1, 1), optim=OptimSettings(
        epochs=1, batch_size=64, lr=0.05, warmup_fraction=0.15)),
    "resnet20": Recipe(widths=(16, 32, 64), blocks=(3, 3, 3), optim=RECIPE),
    "gpu-resnet18": Recipe(widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), optim=OptimSettings(
        epochs=200, batch_size=128, lr=0.1), eval_batch_size=2000),
}


@dataclass(frozen=True)
class RecipeResult:
    """The trained network (eval mode), the run's config and its per-epoch history."""

    model: CifarResNet
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
    """Train a fresh :class:`CifarResNet` on ``data`` with ``loss`` (see the module doc).

    Args:
        log: optional ``callable(str)`` that receives one line per finished epoch.
    """
    criterion = check_inputs(recipe, data, loss, loss_options)
    dev = resolve_device(device)
    amp_dtype = resolve_amp(recipe.amp, dev)
    model = recipe.network(len(data.class_names), seed)
    config = {"recipe": recipe.as_dict(), "data": data.name, "data_fingerprint":
              data.fingerprint(), "n_train": len(data), "loss": loss,
              "loss_options": criterion.hyperparams, "seed": seed, "amp": str(amp_dtype)}
    settings = recipe.optim
    opt = settings.make_optimizer(model.parameters())
    scheduler = settings.make_scheduler(opt, -(-len(data) // settings.batch_size))
    history: list[dict[str, Any]] = []
    out_dir = Path(out) if out is not None else None
    previous = ckpt.read_checkpoint(out_dir) if out_dir is not None else None
    if previous is not None:
        record, weights, opt_state = previous
        if record["config"] != config:
            raise InvalidInputError(
                f"{out_dir} holds a run of another config; train into another out folder")
        load_strict(model, weights, origin=repr(os.fspath(out_dir / ckpt.WEIGHTS)))  # type: ignore[operator]
        opt.load_state_dict(opt_state)
        scheduler.load_state_dict(record["scheduler"])
        history = record["history"]
    model.to(dev)
    if recipe.channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-arg]
    opt.load_state_dict(opt.state_dict())  # optimiser state onto the parameters' device
    images, labels = data.images.to(dev), data.labels.to(dev)
    for epoch in range(len(history), recipe.epochs):
        history.append(_epoch(model, criterion, opt, scheduler, images, labels, recipe,
                              _generator(seed, epoch), dev, amp_dtype, epoch))
        if out_dir is not None:
            ckpt.write_checkpoint(out_dir, model.state_dict(), opt.state_dict(), {
                "config": config, "epochs_done": epoch + 1, "history": history,
                "scheduler": scheduler.state_dict()})
        if log is not None:
            h = history[-1]
            log(f"  epoch {h['epoch']}/{recipe.epochs}: loss {h['loss']:.4f}, train acc "
                f"{h['train_accuracy']:.3f}, {h['images_per_s']:.0f} images/s")
    model.load_state_dict(model.state_dict())  # forget the memoised digest of the old weights
    return RecipeResult(model.eval(), config, history)


def _epoch(model, criterion, opt, scheduler, images, labels, recipe, gen, dev, amp_dtype,  # type: ignore[no-untyped-def]
           epoch) -> dict[str, Any]:
    """One pass over the images in this epoch's seeded order."""
    model.train()
    order = torch.randperm(len(images), generator=gen).to(dev)
    loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
    correct = torch.zeros((), dtype=torch.int64, device=dev)
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(0, len(order), recipe.batch_size):
        rows = order[i : i + recipe.batch_size]
        x = augment(images[rows], gen, pad=recipe.pad, flip=recipe.flip, mean=recipe.mean,
                    std=recipe.std)
        y = labels[rows]
        with autocast(dev, amp_dtype):
            logits = model(x)
        value = criterion(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        scheduler.step()
        loss_sum += value.detach().double() * len(y)
        correct += (logits.detach().argmax(1) == y).sum()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - start
    n = len(order)
    return {"epoch": epoch + 1, "loss": float(loss_sum) / n, "train_accuracy": int(correct) / n,
            "images": n, "seconds": seconds, "cpu_seconds": time.process_time() - cpu_start,
            "images_per_s": n / seconds,
            "lr_end": float(scheduler.get_last_lr()[0])}


@torch.no_grad()
def predict_logits(model: CifarResNet, data: TensorImages, recipe: Recipe,
                   device: str | torch.device = "auto") -> np.ndarray:
    """Logits (N, classes) float32 of ``model`` (eval mode) on ``data``, in batches."""
    if data.size != (recipe.image_size, recipe.image_size):
        raise InvalidInputError(
            f"{data.name}: {data.size[0]} x {data.size[1]} px images for a recipe of "
            f"{recipe.image_size} px; down-sample them (tensor_images(..., size=...))")
    dev = resolve_device(device)
    amp_dtype = resolve_amp(recipe.amp, dev)
    model.eval().to(dev)
    out = []
    for i in range(0, len(data), recipe.eval_batch_size):
        x = normalise(data.images[i : i + recipe.eval_batch_size].to(dev), recipe.mean,
                      recipe.std, channels_last=recipe.channels_last)
        with autocast(dev, amp_dtype):
            out.append(model(x).float().cpu())
    return torch.cat(out).numpy()
