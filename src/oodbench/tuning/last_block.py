"""``retrain="last_block"`` variants: the last block and the head retrained from cached inputs.

A cheaper approximation of the tuning paper's variants (Mondal et al., arXiv 2602.05935,
Algorithm 1 line 5 trains a network per split): everything up to the last block stays the given
network's, only the last block, the parameterised modules after it and the head (cut to the kept
classes, from their current weights) are trained, on the kept classes' fit rows, with
cross-entropy. The last block is :func:`oodbench.train.parts.trainable_modules`' ``"last_block"``
(EfficientNet-Lite0: ``blocks[6]``, ``conv_head``, ``bn2``; ResNet: ``layer4[-1]``).

No image pass per epoch: the input of the last block is computed once per image
(:func:`block_inputs`, one pass through the network, cached by content under
``cache_dir()/tune/last_block/``: model spec and weights digest, source fingerprint and rows) and
every training step and every variant's activations run from it. To run only the part after the
block, the network is called on a small dummy batch (32 x 32 pixels, or the model's own input
size where the network needs it) with a forward pre-hook that replaces the block's input by the
cached one: the prefix computes on the dummy only, and its output is discarded.

Training (``train`` options: fields of :class:`~oodbench.train.optim.OptimSettings`, applied to
its preset :data:`~oodbench.train.optim.LAST_BLOCK`: ``epochs=10, batch_size=64, lr=0.01,
weight_decay=5e-4, optimizer="sgd", schedule="cosine"``, oodbench's choices), seeded
(row order and dropout by ``seed``); the trained parts are cached under the same directory,
keyed by the inputs' digest, the kept classes, the options and the seed. The training runs
on the one loop of :mod:`oodbench.train.loop`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench.atomic_files import atomic_path
from oodbench.config import cache_dir
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.train.loop import StepResult, TrainLoop, batch_slices
from oodbench.train.optim import LAST_BLOCK, from_options
from oodbench.tuning.kept_classes import images_of, reindex, without_classes

_FORMAT = 1
#: the dummy image side that drives the network's prefix
_DUMMY_SIDE = 32
_NATIVE_SIDE = 224



def _root() -> Path:
    return cache_dir() / "tune" / "last_block"


def _blocks(model: Any) -> list[torch.nn.Module]:
    from oodbench.train.parts import trainable_modules

    return trainable_modules(model, "last_block")


def block_inputs(model: Any, acts: Activations, *, batch_size: int = 64) -> np.ndarray:
    """The input of ``model``'s last block for each row of ``acts`` (its images, in row order),
    float32, cached by content."""
    from oodbench.extract.loader import iterate_batches

    if acts.source is None or acts.source_indices is None:
        raise InvalidInputError(
            "held_out with retrain='last_block' needs the images behind the activations; pass "
            "activations from oodbench.extract")
    source = images_of(acts)
    key = hashlib.sha256(json.dumps({"format": _FORMAT, "model": model.spec,
                                     "weights": model.weights_digest(),
                                     "source": source.fingerprint()}).encode()).hexdigest()
    path = _root() / "inputs" / f"{key}.npy"
    if path.exists():
        return np.load(path, mmap_mode="r")
    first = _blocks(model)[0]
    captured: dict[int, np.ndarray] = {}
    rows: list[np.ndarray] = []

    def keep(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        captured[len(captured)] = args[0].detach().float().cpu().numpy()

    was_training = model.training
    model.eval()
    handle = first.register_forward_pre_hook(keep)
    try:
        with torch.no_grad():
            for images, positions in iterate_batches(model, source, batch_size=batch_size,
                                                     device="cpu"):
                model.features(images)
                rows.append(positions)
    finally:
        handle.remove()
        model.train(was_training)
    order = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    if order.size != len(source):
        raise InvalidInputError(
            f"held_out with retrain='last_block': {len(source) - order.size} images of "
            f"{source.name!r} could not be read; their block inputs are missing")
    inputs = np.concatenate([captured[i] for i in range(len(captured))])[np.argsort(order)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, inputs)
    return inputs


@contextmanager
def _replaced_input(block: torch.nn.Module, value: torch.Tensor) -> Iterator[None]:
    handle = block.register_forward_pre_hook(lambda module, args: (value,))
    try:
        yield
    finally:
        handle.remove()


class LastBlockVariant:
    """The model with its last block and head retrained on the kept classes (see module doc)."""

    def __init__(self, model: Any, kept: np.ndarray, inputs: np.ndarray, labels: np.ndarray,
                 options: Mapping[str, Any], seed: int):

        self.kept = kept
        self.net = without_classes(model, kept)
        self._side = _DUMMY_SIDE
        path = _root() / "nets" / f"{self._key(inputs, kept, options, seed)}.pt"
        if path.exists():
            self.net.load_state_dict(torch.load(path, weights_only=True))
            self.from_cache = True
        else:
            self._train(inputs, labels, options, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                torch.save(self.net.state_dict(), tmp)
            self.from_cache = False
        self.net.eval()

    @staticmethod
    def _key(inputs: np.ndarray, kept: np.ndarray, options: Mapping[str, Any], seed: int) -> str:
        digest = hashlib.sha256()
        for start in range(0, len(inputs), 256):
            digest.update(np.ascontiguousarray(inputs[start : start + 256]).tobytes())
        digest.update(json.dumps({"format": _FORMAT, "kept": kept.tolist(), "options": dict(options),
                                  "seed": seed, "torch": torch.__version__},
                                 sort_keys=True).encode())
        return digest.hexdigest()

    def _forward(self, block_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(features, logits) of the network from its last block's input."""
        first = _blocks(self.net)[0]
        channels = next((m.in_channels for m in self.net.modules() if isinstance(m, torch.nn.Conv2d)), 3)
        for side in (self._side, _NATIVE_SIDE):
            dummy = torch.zeros(len(block_input), channels, side, side)
            try:
                with _replaced_input(first, block_input):
                    features = self.net.features(dummy)
            except RuntimeError:  # the network needs its own input size (e.g. a ViT)
                if side == _NATIVE_SIDE:
                    raise
                continue
            self._side = side
            return features, self.net.head(features)
        raise AssertionError("unreachable")

    def _train(self, inputs: np.ndarray, labels: np.ndarray, options: Mapping[str, Any],
               seed: int) -> None:
        settings, _ = from_options(options, LAST_BLOCK)
        trainable = [p for m in _blocks(self.net) for p in m.parameters()]
        for p in self.net.parameters():
            p.requires_grad_(False)
        for p in trainable:
            p.requires_grad_(True)
        x, y = torch.from_numpy(np.asarray(inputs, dtype=np.float32)), torch.from_numpy(labels)
        opt = settings.make_optimizer(trainable)
        steps = -(-len(x) // settings.batch_size)
        loop: TrainLoop[torch.Tensor] = TrainLoop(
            opt, settings.make_scheduler(opt, steps), trainable, settings.epochs)
        generator = torch.Generator().manual_seed(seed)
        self.net.eval()
        for module in _blocks(self.net):
            module.train()

        def step(epoch: int, index: int, idx: torch.Tensor) -> StepResult:
            loss = torch.nn.functional.cross_entropy(self._forward(x[idx])[1], y[idx])
            loop.step(loss)
            return StepResult(loss.detach(), len(idx))

        loop.run(lambda epoch: batch_slices(torch.randperm(len(x), generator=generator),
                                            settings.batch_size),
                 step, lambda t: {"epoch": t.epoch + 1, "loss": float(t.loss_sum) / t.seen},
                 torch_seed=seed)  # dropout masks

    def apply(self, acts: Activations, inputs: np.ndarray) -> Activations:
        """``acts`` through the variant: its logits, features and head; labels re-indexed to
        the kept classes (-1 elsewhere)."""

        features, logits = [], []
        with torch.no_grad():
            for start in range(0, len(inputs), 256):
                f, z = self._forward(torch.from_numpy(np.array(inputs[start : start + 256],
                                                                 dtype=np.float32)))
                features.append(f.numpy())
                logits.append(z.numpy())
        head = self.net.head_weight.detach().numpy(), self.net.head_bias.detach().numpy()
        return replace(acts, logits=np.concatenate(logits), features=np.concatenate(features),
                       head_weight=head[0].astype(np.float32), head_bias=head[1].astype(np.float32),
                       labels=reindex(acts.labels, self.kept), feature_map=None,
                       meta={**acts.meta, "restricted_classes": self.kept.tolist(),
                             "retrain": "last_block"})
