"""The one training loop under every training entry point of oodbench.

    loop = TrainLoop(opt, scheduler, params, epochs=10, device=dev, amp=torch.bfloat16,
                     checkpoint=Checkpoint(out, config, net), progress=Progress("train", n))
    history = loop.run(begin_epoch, step, record)

An entry point (``train``, ``train_head``, ``train_recipe``, the CLIP methods, the last-block
tuning variants, the demo's ``train_small_cnn``) gives its data and its loss; the loop owns the
rest:

* ``begin_epoch(epoch) -> batches``: the epoch's seeded order, the modules' train/eval modes;
* ``step(epoch, index, batch) -> StepResult``: the forward pass and the loss, handed to
  :meth:`TrainLoop.step` (zero_grad, backward, DDP gradient averaging, gradient clipping, the
  optimiser step with the float16 grad scaler); a method that needs more than one optimiser
  step per batch (DOE's perturbation step, :mod:`oodbench.train.methods.doe`) calls :func:`optimise`
  and :func:`backward` itself from this hook. Nothing outside this module calls
  ``.backward()``;
* ``record(EpochTotals) -> dict``: the epoch's history entry;

and the loop steps the scheduler once per batch, keeps the running loss and the progress bar,
writes a checkpoint after every epoch and resumes from it bit-identically
(:mod:`oodbench.train.checkpoint`, with the grad scaler's state when there is one), runs the
epochs in a forked torch RNG (optionally seeded), synchronises DDP ranks after each epoch
(rank 0 writes and shows the bar) and calls the per-epoch ``callbacks``.

Why not Lightning Fabric or Hugging Face accelerate: neither is a dependency of oodbench (nor
installed here), and both would own the parts whose bits the tests pin down: the data order
(oodbench's seeded global batches split into contiguous DDP shares, :mod:`oodbench.train.ddp`),
the checkpoint format (the two-phase safetensors commit that resumes to the same bits) and the
gradient averaging of the CLIP methods, whose losses need the whole global batch
(``gather_with_grad``). What they would add (AMP, the scaler, clipping, DDP setup) is a few lines
here, so a loop of oodbench's own keeps the numbers and avoids a heavy dependency.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from oodbench.extract.runtime import autocast
from oodbench.train import checkpoint as ckpt
from oodbench.train import ddp
from oodbench.train.progress import training_bar

B = TypeVar("B")


def backward(value: torch.Tensor) -> None:
    """The gradients of ``value`` into the ``.grad`` of the leaves, no optimiser step (DOE's
    perturbation direction; under a DDP module its reducer averages them over the ranks)."""
    value.backward()


def optimise(
    value: torch.Tensor, optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter],
    *, scaler: torch.amp.GradScaler | None = None, average: bool = False,
    clip_norm: float | None = None, before_step: Callable[[], None] | None = None,
) -> None:
    """One optimisation step on ``value``: zero the gradients, backward (scaled by the float16
    ``scaler`` when given), average the gradients over the DDP ranks when ``average``, clip
    their norm to ``clip_norm`` (after unscaling), call ``before_step`` (DOE: restore the
    unperturbed weights), step the optimiser and update the scaler."""
    optimizer.zero_grad(set_to_none=True)
    backward(value if scaler is None else scaler.scale(value))
    if average:
        ddp.average_gradients(params)
    if clip_norm is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, clip_norm)
    if before_step is not None:
        before_step()
    if scaler is None:
        optimizer.step()
        return
    scaler.step(optimizer)
    scaler.update()


@dataclass
class StepResult:
    """What one batch's step hook returns to the loop."""

    loss: torch.Tensor | None  # the batch's mean loss (detached); None: the batch was skipped
    count: int = 0  # the samples behind ``loss``: its weight in the epoch's mean
    images: int | None = None  # images for the progress bar (default ``count``)
    skipped: int = 0  # unreadable images of the batch


@dataclass
class EpochTotals:
    """What the loop accumulated over one epoch, for the entry point's ``record`` hook."""

    epoch: int
    loss_sum: torch.Tensor  # float64 on the device: sum of loss x count
    seen: int
    skipped: int
    seconds: float
    cpu_seconds: float  # this process's CPU time (``time.process_time``)


@dataclass
class Checkpoint:
    """The files each finished epoch writes under ``out`` and how a run resumes from them.

    ``weights()`` (default ``net.state_dict()``) goes to ``model.safetensors``, ``state()``
    (a method's own tensors, optional) to ``method.safetensors``; on resume ``load(weights)``
    (default a strict load into ``net``) and ``load_state(method tensors)`` restore them.
    """

    out: Path
    config: dict[str, Any]
    net: torch.nn.Module
    resume: bool = True
    weights: Callable[[], dict[str, torch.Tensor]] | None = None
    state: Callable[[], dict[str, torch.Tensor] | None] | None = None
    load: Callable[[dict[str, torch.Tensor]], None] | None = None
    load_state: Callable[[dict[str, torch.Tensor]], None] | None = None

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        if self.load is not None:
            self.load(weights)
            return
        from oodbench.models.checkpoint import load_strict

        device = next((p.device for p in self.net.parameters()), torch.device("cpu"))
        load_strict(self.net, {k: v.to(device) for k, v in weights.items()},
                    origin=repr(str(self.out / ckpt.WEIGHTS)))


@dataclass(frozen=True)
class Progress:
    """The progress bar: its label and the images of one epoch."""

    description: str
    images_per_epoch: int
    enabled: bool = True


@dataclass
class TrainLoop(Generic[B]):
    """The loop (see the module docstring): the optimiser, its per-step scheduler and the
    parameters it trains, where the run executes, and what it writes and shows."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    params: list[torch.nn.Parameter]
    epochs: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    amp: torch.dtype | None = None  # autocast dtype; float16 brings a grad scaler
    world: int = 1
    rank: int = 0
    #: average the gradients over the ranks in :meth:`step` (False when the network is wrapped
    #: in DDP, which averages them itself during backward)
    average_gradients: bool = False
    clip_norm: float | None = None
    checkpoint: Checkpoint | None = None
    progress: Progress | None = None
    callbacks: Sequence[Callable[[dict[str, Any]], None]] = ()
    history: list[dict[str, Any]] = field(default_factory=list, init=False)
    start_epoch: int = field(default=0, init=False)  # epochs a checkpoint held (0: a new run)
    #: the float16 grad scaler (CUDA's, as before the loop was one: on a CPU it disables itself)
    scaler: torch.amp.GradScaler | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.amp == torch.float16:
            self.scaler = torch.amp.GradScaler("cuda")
        self._resumed = False

    def autocast(self) -> AbstractContextManager[None]:
        """Autocast in the loop's AMP dtype on its device (nothing when AMP is off)."""
        return autocast(self.device, self.amp)

    def step(self, value: torch.Tensor, *, before_step: Callable[[], None] | None = None) -> None:
        """One optimisation step on ``value`` (:func:`optimise` with the loop's settings)."""
        optimise(value, self.optimizer, self.params, scaler=self.scaler,
                 average=self.average_gradients and self.world > 1, clip_norm=self.clip_norm,
                 before_step=before_step)

    def resume(self) -> int:
        """Restore the last finished epoch of ``checkpoint`` when it holds this config (the
        network, the method's state, the optimiser, scheduler and scaler); returns the epochs
        done. :meth:`run` calls it when the entry point has not."""
        self._resumed = True
        cp = self.checkpoint
        if cp is None:
            return 0
        previous = ckpt.resume_checkpoint(cp.out, cp.config, cp.resume)
        if previous is None:
            return 0
        record, weights, opt_state = previous
        cp.load_weights(weights)
        self.optimizer.load_state_dict(opt_state)
        if self.scheduler is not None:
            self.scheduler.load_state_dict(record["scheduler"])
        if self.scaler is not None and "scaler" in record:
            self.scaler.load_state_dict(record["scaler"])
        if cp.load_state is not None:
            cp.load_state(ckpt.read_method_state(cp.out))
        self.start_epoch, self.history = record["epochs_done"], record["history"]
        return self.start_epoch

    def run(self, begin_epoch: Callable[[int], Iterable[B]],
            step: Callable[[int, int, B], StepResult],
            record: Callable[[EpochTotals], dict[str, Any]],
            *, torch_seed: int | None = None) -> list[dict[str, Any]]:
        """Train the remaining epochs; returns the history (every epoch's record)."""
        if not self._resumed:
            self.resume()
        # the optimiser state (resumed on the CPU) onto the parameters' device
        self.optimizer.load_state_dict(self.optimizer.state_dict())
        bar = self.progress or Progress("", 0, enabled=False)
        show = bar.enabled and self.rank == 0
        cuda = [self.device] if self.device.type == "cuda" else []
        with training_bar(bar.description, self.epochs * bar.images_per_epoch,
                          completed=self.start_epoch * bar.images_per_epoch,
                          enabled=show) as advance, torch.random.fork_rng(devices=cuda):
            if torch_seed is not None:
                torch.manual_seed(torch_seed)
            for epoch in range(self.start_epoch, self.epochs):
                totals = self._epoch(epoch, begin_epoch(epoch), step, advance if show else None)
                self.history.append(record(totals))
                self._write(epoch)
                for callback in self.callbacks:
                    callback(self.history[-1])
        return self.history

    def _epoch(self, epoch: int, batches: Iterable[B], step: Callable[[int, int, B], StepResult],
               advance: Callable[[int, float], None] | None) -> EpochTotals:
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        seen, skipped = 0, 0
        start, cpu_start = time.perf_counter(), time.process_time()
        for index, batch in enumerate(batches):
            result = step(epoch, index, batch)
            skipped += result.skipped
            if self.scheduler is not None:
                self.scheduler.step()
            if result.loss is None:
                continue
            loss_sum += result.loss.double() * result.count
            seen += result.count
            if advance is not None:
                advance(result.count if result.images is None else result.images,
                        float(loss_sum) / max(seen, 1))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return EpochTotals(epoch, loss_sum, seen, skipped, time.perf_counter() - start,
                           time.process_time() - cpu_start)

    def _write(self, epoch: int) -> None:
        """The epoch's checkpoint (rank 0), then a barrier over the ranks."""
        cp = self.checkpoint
        if cp is not None and self.rank == 0:
            record: dict[str, Any] = {"config": cp.config, "epochs_done": epoch + 1,
                                      "history": self.history}
            if self.scheduler is not None:
                record["scheduler"] = self.scheduler.state_dict()
            if self.scaler is not None:
                record["scaler"] = self.scaler.state_dict()
            weights = cp.weights() if cp.weights is not None else cp.net.state_dict()
            opt_state = self.optimizer.state_dict()
            ckpt.write_checkpoint(cp.out, weights, opt_state, record,
                                  method=None if cp.state is None else cp.state())
        if self.world > 1:
            dist.barrier()


def data_parallel(model: torch.nn.Module, device: torch.device, world: int) -> torch.nn.Module:
    """``model`` wrapped in DDP under ``torchrun`` (``world`` > 1; it averages the gradients in
    backward), else ``model`` itself."""
    if world <= 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)


def epoch_order(seed: int, epoch: int, rows: np.ndarray, batch_size: int, world: int = 1,
                rank: int = 0) -> tuple[np.random.Generator, list[np.ndarray], list[np.ndarray]]:
    """Epoch ``epoch``'s seeded order of ``rows``: permuted by ``default_rng([seed, epoch])``,
    torch seeded from the same generator (dropout masks, loader workers), cut into global
    batches and this rank's shares of them; returns (the generator, for further draws such as
    the outlier order; global batches; shares)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(rows)
    torch.manual_seed(int(rng.integers(2**62)))
    global_batches = ddp.batches(order, batch_size)
    return rng, global_batches, [ddp.share(b, world, rank) for b in global_batches]


def batch_slices(order: torch.Tensor, batch_size: int) -> Iterator[torch.Tensor]:
    """``order`` cut into consecutive batches of ``batch_size`` (the last may be shorter)."""
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]
