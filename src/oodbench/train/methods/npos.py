"""NPOS fine-tuning of a CLIP ViT: the frozen early blocks cached once, the later blocks,
``ln_post``, ``proj`` and the MLP phi trained with :mod:`oodbench.losses.npos` on outliers
synthesised by :mod:`oodbench.train.npos_synthesis`.

Tao, Du, Zhu & Li, ICLR 2023 (arXiv 2303.02966); checked against github.com/deeplearning-wisc/npos
``CLIP_based/OOD/train_npos.py`` and ``CLIP/CLIP_ft.py``. The vision tower splits at block
f = ``frozen_blocks`` (10 of ViT-B/16's 12):

    tokens(x)   = blocks[0:f](embed(x))                 computed once per image, on disk
                                                        (:mod:`oodbench.train.frozen_cache`)
    e(x)        = proj^T ln_post(pool(blocks[f:](tokens(x))))      the raw image embedding
    logits      = the classifier's zero-shot head on e / ||e||     (text tower frozen)
    phi(e)      = Linear(32, 1)(ReLU(Linear(D, 32)(e)))

Per step: the batch's raw embeddings enter the class queues; once they are full and from epoch
``start_epoch`` on, ``keep`` outliers per class are synthesised and the loss adds the
BCE of phi. The official optimiser is SGD with Nesterov momentum 0.9, lr 0.1, weight decay
1e-4, phi at ``mlp_lr_ratio`` (0.1) times the learning rate, batch 1000, 100 epochs; oodbench
sets Nesterov on SGD's groups and phi's learning-rate ratio, and takes the schedule from the
config; its default is the official recipe (:data:`oodbench.train.method_defaults.NPOS`: batch
1000, weight decay 1e-4, 100 epochs, the official ``MultiStepLR(milestones=[60], gamma=10)``, a
tenfold *increase* at epoch 60, as ``schedule="step"``). The zero-shot head is rebuilt with the
official 18 prompt templates (``head_templates="npos"``; ``"model"`` keeps the model's own).
Without augmentation (the cache fixes each image's tokens, as in the official feature files).

Under ``torchrun`` every rank gathers the whole global batch's logits (with gradients) and
embeddings, so the queues, the outliers (seeded by (seed, epoch, step)) and the loss are the
same on every rank and the averaged gradients equal one process's with the same global batch.
The checkpoint's ``model.safetensors`` is the whole open_clip model (``models.load(spec,
weights=...)``); phi and the queues are in ``method.safetensors``. At test time phi is unused
(the paper scores with MCM).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from oodbench.data.source import Source
from oodbench.errors import InvalidInputError
from oodbench.extract.runtime import place_model, resolve_amp
from oodbench.losses.npos import NPOS
from oodbench.models.classifier import Classifier
from oodbench.models.clip import resolve_templates
from oodbench.train import checkpoint as ckpt
from oodbench.train import ddp
from oodbench.train.clip_common import Placement, epoch_record, require_clip
from oodbench.train.frozen_cache import frozen_outputs
from oodbench.train.labels import select_classes
from oodbench.train.loop import Checkpoint, EpochTotals, Progress, StepResult, TrainLoop
from oodbench.train.method_registry import TrainingMethod, register
from oodbench.train.npos_synthesis import ClassQueues, draw, synthesize
from oodbench.train.result import TrainResult

if TYPE_CHECKING:
    from oodbench.train.optim import OptimSettings


class VisionSplit:
    """An open_clip ``VisionTransformer`` cut after block ``frozen``: ``early`` (embedding +
    blocks[:frozen]) and ``late`` (the rest + pooling + ln_post + proj); ``late(early(x))`` is
    ``encode_image(x)``."""

    def __init__(self, visual: nn.Module, frozen: int, spec: str):
        from open_clip.transformer import VisionTransformer

        if not isinstance(visual, VisionTransformer) or visual.attn_pool is not None:
            raise InvalidInputError(
                f"loss 'npos' splits a CLIP ViT's vision blocks; {spec}'s vision tower is "
                f"{type(visual).__name__}{' with attentional pooling' if isinstance(visual, VisionTransformer) else ''}:"
                " use a ViT CLIP (e.g. clip:ViT-B-16-quickgelu/openai)")
        blocks = visual.transformer.resblocks
        if frozen >= len(blocks):
            raise InvalidInputError(
                f"npos: frozen_blocks={frozen} leaves none of {spec}'s {len(blocks)} vision "
                f"blocks to train; use frozen_blocks <= {len(blocks) - 1}")
        self.visual, self.frozen, self.blocks = visual, frozen, blocks
        self.batch_first = getattr(visual.transformer, "batch_first", True)

    def _run(self, x: torch.Tensor, blocks: Any) -> torch.Tensor:
        if not self.batch_first:
            x = x.transpose(0, 1)
        for block in blocks:
            x = block(x)
        return x.transpose(0, 1) if not self.batch_first else x

    def early(self, images: torch.Tensor) -> torch.Tensor:
        return self._run(self.visual._embeds(images), self.blocks[: self.frozen])

    def late(self, tokens: torch.Tensor) -> torch.Tensor:
        pooled, _ = self.visual._pool(self._run(tokens, self.blocks[self.frozen :]))
        return pooled @ self.visual.proj if self.visual.proj is not None else pooled

    def trainable(self) -> list[nn.Parameter]:
        modules = [*self.blocks[self.frozen :], self.visual.ln_post]
        params = [p for m in modules for p in m.parameters()]
        return params + ([self.visual.proj] if self.visual.proj is not None else [])


def uncertainty_mlp(dim: int, hidden: int, seed: int) -> nn.Sequential:
    """phi: D -> hidden -> ReLU -> 1, initialised from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def _step_generator(seed: int, epoch: int, step: int) -> torch.Generator:
    value = int(np.random.default_rng([seed, epoch, step, 7]).integers(2**62))
    return torch.Generator().manual_seed(value)


def train_npos(
    model: Classifier, source: Source, criterion: NPOS, settings: OptimSettings, *,
    out: str | os.PathLike[str], seed: int = 0, resume: bool = True,
    device: str | torch.device = "auto", amp: str = "auto", num_workers: int | str = "auto",
    transform: Callable[..., torch.Tensor] | None = None, progress: bool = True,
) -> TrainResult:
    """Fine-tune a CLIP ViT classifier with NPOS (see the module docstring); the files under
    ``out`` are those of :func:`oodbench.train.train`, plus the frozen blocks' cache."""
    clip_model = require_clip(model, "npos")
    if criterion.head_templates == "npos":
        clip_model.templates = resolve_templates("npos")
        clip_model.refresh_text_head()
    split = VisionSplit(cast(nn.Module, clip_model.clip.visual), criterion.frozen_blocks,
                        model.spec)
    n_classes = clip_model.num_classes
    _, rows, _ = select_classes(source.labels, None, n_classes, f"source {source.name!r}")
    _check_queues_fill(criterion, np.asarray(source.labels)[rows], n_classes, settings.epochs,
                       source.name)
    size, rank, _ = ddp.world()
    place = Placement.create(device, seed, rows, settings.batch_size)
    amp_dtype = resolve_amp(amp, place.device)
    config: dict[str, Any] = {
        "model": model.spec, "initial_weights_sha256": model.weights_digest(),
        "source": source.name, "source_fingerprint": source.fingerprint(), "n_train": int(rows.size),
        "loss": criterion.name, "loss_options": criterion.hyperparams,
        "trainable": f"vision blocks {criterion.frozen_blocks}.., ln_post, proj, phi",
        **settings.as_dict(), "seed": seed, "amp": str(amp_dtype), "world_size": place.world,
    }
    out_dir = Path(out)
    place_model(model, place.device)
    for p in model.parameters():
        p.requires_grad_(False)
    load = transform or model.transform
    dim = int(clip_model.head_weight.shape[1])
    with torch.no_grad():
        probe = split.early(load(_first_image(source, rows)).unsqueeze(0).to(place.device))
    cache_dtype = np.float16 if place.device.type == "cuda" else np.float32
    cache_key = hashlib.sha256(json.dumps(
        {k: config[k] for k in ("model", "initial_weights_sha256", "source_fingerprint")}
        | {"frozen_blocks": criterion.frozen_blocks, "transform": repr(load)},
        sort_keys=True).encode()).hexdigest()[:20]
    cache, ok = frozen_outputs(
        out_dir / "frozen_blocks", cache_key, source, rows, load, split.early,
        tuple(probe.shape[1:]), np.dtype(cache_dtype), device=place.device,
        batch_size=settings.batch_size, num_workers=num_workers, world=size, rank=rank)
    place.rows = np.flatnonzero(ok)  # positions in the cache of the rows that loaded
    unreadable = int((~ok).sum())
    labels = np.asarray(source.labels, dtype=np.int64)[rows]
    phi = uncertainty_mlp(dim, criterion.mlp_hidden, seed).to(place.device)
    visual_params = split.trainable()
    params = [*visual_params, *phi.parameters()]
    for p in params:
        p.requires_grad_(True)
    groups: Any = [{"params": visual_params},
                   {"params": list(phi.parameters()), "lr": settings.lr * criterion.mlp_lr_ratio}]
    opt = settings.make_optimizer(groups)
    if settings.optimizer == "sgd":
        for group in opt.param_groups:
            group["nesterov"] = True
    steps = -(-place.rows.size // settings.batch_size)
    scheduler = settings.make_scheduler(opt, steps)
    queues = ClassQueues(n_classes, criterion.queue_size, dim, device=place.device)
    trained = [*split.blocks[split.frozen :], split.visual.ln_post, phi]

    def method_state() -> dict[str, torch.Tensor]:
        return {**{f"phi.{k}": v for k, v in phi.state_dict().items()}, **queues.state()}

    def load_method_state(state: dict[str, torch.Tensor]) -> None:
        phi.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("phi.")})
        queues.load({k: v for k, v in state.items() if k.startswith("queue.")})

    loop: TrainLoop[Any] = TrainLoop(
        opt, scheduler, params, settings.epochs, device=place.device, amp=amp_dtype,
        world=place.world, rank=place.rank, average_gradients=True,
        checkpoint=Checkpoint(out_dir, config, clip_model.clip, resume=resume,
                              state=method_state, load_state=load_method_state),
        progress=Progress(f"train {model.spec} (npos)", int(place.rows.size), progress))

    def begin(epoch: int) -> Any:
        global_batches, local = place.epoch_batches(epoch)
        for m in trained:
            m.train()
        return zip(local, [len(b) for b in global_batches])

    def step(epoch: int, index: int, batch: Any) -> StepResult:
        positions, global_size = batch
        tokens = torch.from_numpy(cache[positions]).to(place.device, torch.float32)
        y = torch.from_numpy(labels[positions]).to(place.device)
        with loop.autocast():
            embedding = split.late(tokens).float()
            own = torch.cat([clip_model.head(F.normalize(embedding, dim=-1)),
                             phi(embedding)], dim=1)
        batch_logits = ddp.gather_with_grad(own.float())
        batch_labels = ddp.gather_with_grad(y.float()).long()
        was_full = queues.full
        queues.push(ddp.gather_with_grad(embedding.detach()), batch_labels)
        outlier_logits = None
        if was_full and epoch >= criterion.start_epoch:
            noise, picks = draw(n_classes, dim, samples=criterion.samples,
                                boundary=criterion.boundary,
                                generator=_step_generator(place.seed, epoch, index))
            outliers = synthesize(queues.data, noise.to(place.device), picks,
                                  k=criterion.k, boundary=criterion.boundary,
                                  sigma=criterion.sigma, keep=criterion.keep)
            with loop.autocast():
                outlier_logits = torch.cat(
                    [clip_model.head(F.normalize(outliers, dim=-1)), phi(outliers)],
                    dim=1).float()
        value = criterion(batch_logits, batch_labels, outlier_logits)
        loop.step(value)
        return StepResult(value.detach(), len(batch_labels), images=global_size)

    def record(t: EpochTotals) -> dict[str, Any]:
        return epoch_record(t.epoch, float(t.loss_sum), t.seen,
                            unreadable if place.rank == 0 else 0, t.seconds, place.device)

    try:
        history = loop.run(begin, step, record)
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
        model.eval()
    clip_model._digest = None  # the image tower changed
    return TrainResult(model, out_dir, out_dir / ckpt.WEIGHTS, config, history,
                       loop.start_epoch)


def _check_queues_fill(criterion: NPOS, labels: np.ndarray, n_classes: int, epochs: int,
                       name: str) -> None:
    """A one-line error when some class queue cannot fill within the run (its class has fewer
    than ``queue_size / epochs`` training images): outliers are synthesised only once every
    queue is full, so the outlier loss would never switch on."""
    counts = np.bincount(labels.astype(np.int64), minlength=n_classes)
    smallest = int(np.argmin(counts))
    if int(counts[smallest]) * epochs < criterion.queue_size:
        raise InvalidInputError(
            f"loss 'npos': class {smallest} of source {name!r} has {int(counts[smallest])} "
            f"training images, so over epochs={epochs} its queue receives "
            f"{int(counts[smallest]) * epochs} < queue_size={criterion.queue_size} embeddings and "
            "never fills: the outlier loss would never switch on; set queue_size <= "
            f"{int(counts[smallest]) * epochs} or train for more epochs")


def _first_image(source: Source, rows: np.ndarray) -> Any:
    """A readable training image, for the shape of the frozen blocks' output."""
    for position in rows[:64]:
        try:
            return source.load(int(position))
        except Exception:  # noqa: BLE001 - an unreadable image is skipped and counted later
            continue
    raise InvalidInputError(f"source {source.name!r}: none of its first training images loads")


register(TrainingMethod("npos", "CLIP fine-tuning with NPOS's own loop (synthesised outliers)",
                        train_npos, frozenset({"clip"})))
