"""The frozen-feature fast path: a new linear head trained on cached features, no image pass.

    result = train_head(train_activations, loss="logitnorm", classes=[0, 1, 2],
                        optim=OptimSettings(epochs=30, batch_size=256))
    acts = result.apply(test_activations)     # logits = features @ W.T + b, labels re-indexed

Everything a detector reads (logits, head weight and bias) then comes from the new head, so
every detector runs on ``result.apply(...)`` unchanged. Rows are shuffled with a seeded
generator and the head is initialised from the seed, so a CPU run is deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from oodbench import losses
from oodbench.errors import ClassCountMismatchError, InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.models._adapter import resolve_device
from oodbench.train.labels import select_classes
from oodbench.train.loop import Progress, StepResult, TrainLoop, batch_slices
from oodbench.train.optim import HEAD, OptimSettings
from oodbench.train.optim import resolve as optim_settings


@dataclass(frozen=True)
class HeadResult:
    """A linear head trained on frozen features.

    Attributes:
        weight: (C', D) float32, ``C'`` = the head's outputs (``len(classes)``, plus one per
            group for MOS).
        bias: (C',) float32.
        classes: (len(classes),) int64: the original class index of each new class.
        config: every setting of the run (loss and its options, optimiser, seed, data sizes).
        history: the mean training loss of each epoch.
    """

    weight: np.ndarray
    bias: np.ndarray
    classes: np.ndarray
    config: dict[str, Any] = field(default_factory=dict)
    history: list[float] = field(default_factory=list)

    def logits(self, features: np.ndarray) -> np.ndarray:
        """``features @ weight.T + bias`` in float32: (N, C')."""
        f = np.asarray(features, dtype=np.float32)
        if f.ndim != 2 or f.shape[1] != self.weight.shape[1]:
            raise ClassCountMismatchError(
                f"this head takes {self.weight.shape[1]}-dimensional features; got shape {f.shape} "
                "(features of another model or layer?)"
            )
        return f @ self.weight.T + self.bias

    def apply(self, acts: Activations) -> Activations:
        """``acts`` with this head: new logits, head weight/bias, labels re-indexed to
        ``classes`` (-1 for a label of any other class)."""
        acts.require("features", who="HeadResult.apply")
        labels = np.asarray(acts.labels, dtype=np.int64)
        lookup = np.full(max(int(self.classes.max()), int(labels.max(initial=0))) + 1, -1,
                         dtype=np.int64)
        lookup[self.classes] = np.arange(self.classes.size)
        new_labels = np.where(labels >= 0, lookup[np.clip(labels, 0, None)], -1)
        meta = {**acts.meta, "head": {k: self.config[k] for k in ("loss", "loss_options", "seed")
                                      if k in self.config},
                "restricted_classes": self.classes.tolist()}
        if "mos_groups" in self.config:
            meta["mos_groups"] = self.config["mos_groups"]
        return replace(acts, logits=self.logits(acts.features), labels=new_labels,  # type: ignore[arg-type]
                       head_weight=self.weight, head_bias=self.bias, meta=meta)


def _features(acts: Activations, rows: np.ndarray | None = None) -> torch.Tensor:
    f = np.asarray(acts.features if rows is None else acts.features[rows], dtype=np.float32)  # type: ignore[index]
    if not np.isfinite(f).all():
        raise InvalidInputError("train_head: the features hold NaN or inf values")
    return torch.from_numpy(np.ascontiguousarray(f))


def train_head(
    train: Activations,
    *,
    loss: str = "ce",
    classes: Sequence[int] | np.ndarray | None = None,
    num_classes: int | None = None,
    optim: OptimSettings | None = None,
    seed: int = 0,
    device: str | torch.device = "auto",
    loss_options: Mapping[str, Any] | None = None,
    outliers: Activations | None = None,
    outlier_batch_size: int | None = None,
    progress: bool = False,
    **deprecated: Any,
) -> HeadResult:
    """Train a new linear head on ``train.features`` / ``train.labels`` (no image pass).

    Args:
        train: ID training activations with ``features`` (extract with capture including
            "features").
        loss: a name of :func:`oodbench.losses.available` (``ce``, ``logitnorm``, ``hem``, ...);
            ``loss_options`` are its keyword arguments (``{"tau": 0.04}``).
        classes: the class ids to keep (others' rows are dropped, labels re-indexed to
            positions in ``classes``); default every class ``0 .. num_classes - 1``.
        num_classes: classes of the new head when ``classes`` is None (default: the width of
            ``train.logits``); a label outside it raises ``ClassCountMismatchError``.
        optim: the optimiser settings (:class:`~oodbench.train.optim.OptimSettings`); default
            :data:`~oodbench.train.optim.HEAD` (30 epochs, batch 256, SGD lr 0.1, cosine).
            The old keywords ``epochs=``, ``batch_size=``, ``lr=``, ... still work (changing
            ``HEAD``) with a ``DeprecatedArgumentWarning``.
        seed: head initialisation and row order.
        device: ``"auto"`` (CUDA, MPS, else CPU), or a torch device.
        outliers: outlier activations (features) for losses that need them (``oe``); each step
            draws ``outlier_batch_size`` (default ``2 * batch_size``, as the OE paper's 128 ID +
            256 outlier images) of them.
        progress: show a progress bar with images/s and the running loss.
    """
    settings = optim_settings(optim, HEAD, deprecated, "train_head")
    epochs, batch_size = settings.epochs, settings.batch_size
    criterion = losses.create(loss, **dict(loss_options or {}))
    train.require("features", who="train_head")
    if criterion.needs_outliers and outliers is None:
        raise InvalidInputError(
            f"loss {loss!r} needs outlier activations: train_head(..., outliers=extract(model, "
            "outlier_source))"
        )
    if outliers is not None:
        outliers.require("features", who="train_head (outliers)")
    chosen, rows, labels = select_classes(
        train.labels, classes, num_classes if num_classes is not None else train.num_classes,
        "train_head"
    )
    x = _features(train, rows)
    y = torch.from_numpy(labels)
    x_out = _features(outliers) if (outliers is not None and criterion.needs_outliers) else None
    out_batch = outlier_batch_size or 2 * batch_size
    dev = resolve_device(device)
    width = criterion.head_outputs(chosen.size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = nn.Linear(x.shape[1], width).to(dev)
    opt = settings.make_optimizer(head.parameters())
    steps = -(-len(x) // batch_size)
    loop: TrainLoop[tuple[torch.Tensor, torch.Tensor | None]] = TrainLoop(
        opt, settings.make_scheduler(opt, steps), list(head.parameters()), epochs, device=dev,
        progress=Progress(f"head ({loss})", len(x), progress))
    generator = torch.Generator().manual_seed(seed)

    def begin(epoch: int) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The epoch's row batches, each with its outlier rows (drawn from ``generator``)."""
        order = torch.randperm(len(x), generator=generator)
        if x_out is None:
            return [(idx, None) for idx in batch_slices(order, batch_size)]
        out_order = torch.randperm(len(x_out), generator=generator)
        return [(idx, out_order[(torch.arange(out_batch) + step * out_batch) % len(x_out)])
                for step, idx in enumerate(batch_slices(order, batch_size))]

    def step(epoch: int, index: int, batch: tuple[torch.Tensor, torch.Tensor | None]
             ) -> StepResult:
        idx, pick = batch
        out_logits = None if pick is None or x_out is None else head(x_out[pick].to(dev))
        value = criterion(head(x[idx].to(dev)), y[idx].to(dev), out_logits)
        loop.step(value)
        return StepResult(value.detach(), len(idx))

    start = time.perf_counter()
    history = [h["loss"] for h in loop.run(
        begin, step, lambda t: {"epoch": t.epoch + 1, "loss": float(t.loss_sum) / len(x)})]
    config: dict[str, Any] = {
        "loss": loss, "loss_options": criterion.hyperparams, **settings.as_dict(), "seed": seed,
        "device": str(dev), "n_train": int(len(x)),
        "n_outliers": None if x_out is None else int(len(x_out)),
        "outlier_batch_size": None if x_out is None else out_batch,
        "feature_model": train.meta.get("model"), "seconds": time.perf_counter() - start,
    }
    if loss == "mos":
        config["mos_groups"] = criterion.hyperparams["groups"]
    return HeadResult(
        weight=head.weight.detach().cpu().numpy().astype(np.float32),
        bias=head.bias.detach().cpu().numpy().astype(np.float32),
        classes=chosen, config=config, history=history,
    )
