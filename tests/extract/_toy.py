"""Tiny, deterministic stand-ins for a real source and classifier (importable by subprocesses)."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision import transforms

from oodbench.data.source import Source
from oodbench.errors import CorruptImageError
from oodbench.models.classifier import Classifier


class RandomImages(Source):
    """``n`` random RGB images of ``size`` px with random labels; ``corrupt`` positions fail."""

    def __init__(
        self,
        n: int,
        size: int = 12,
        num_classes: int = 3,
        seed: int = 0,
        corrupt: Sequence[int] = (),
        name: str = "random",
        labels: np.ndarray | None = None,
    ):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
        self._labels = (
            rng.integers(0, num_classes, size=n).astype(np.int64) if labels is None else labels
        )
        self.corrupt = set(corrupt)
        self.name = name

    def __len__(self) -> int:
        return len(self.images)

    def load(self, index: int) -> Image.Image:
        if index in self.corrupt:
            raise CorruptImageError(f"{self.name}:{index} is corrupt (on purpose)")
        return Image.fromarray(self.images[index])

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    @property
    def ids(self) -> list[str]:
        return [f"{self.name}:{i}" for i in range(len(self))]

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.images.tobytes())
        h.update(np.asarray(self._labels, dtype="<i8").tobytes())
        h.update(repr(sorted(self.corrupt)).encode())
        return h.hexdigest()


class TinyNet(Classifier):
    """conv-relu-conv-relu -> average pool -> linear head; counts forward passes.

    ``delay`` seconds of sleep per forward pass slow it down for the kill-and-resume test (the
    delay is no part of the weights or the spec, so it does not change the cache key).
    """

    def __init__(self, num_classes: int = 3, width: int = 8, seed: int = 0, delay: float = 0.0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1, stride=2), nn.ReLU(),
        )
        self.fc = nn.Linear(2 * width, num_classes)
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
        self.spec = f"test:tinynet-{num_classes}-{width}"
        self.transform = transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.25] * 3)]
        )
        self.num_classes = num_classes
        self.delay = delay
        self.calls = 0

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        return self.body(x)

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return feature_map.mean(dim=(2, 3))

    def head(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features)

    @property
    def head_weight(self) -> torch.Tensor:
        return self.fc.weight

    @property
    def head_bias(self) -> torch.Tensor:
        return self.fc.bias

    def weights_digest(self) -> str:
        h = hashlib.sha256()
        for name, tensor in sorted(self.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().numpy().tobytes())
        return h.hexdigest()


def reference_forward(model: TinyNet, source: Source, rows: Sequence[int]) -> dict[str, np.ndarray]:
    """The same model applied directly (no DataLoader, no cache) to ``rows``, one image at a time."""
    out: dict[str, list[np.ndarray]] = {"logits": [], "features": [], "feature_map": []}
    with torch.no_grad():
        for i in rows:
            x = model.transform(source.load(int(i)))[None]
            fmap = model.forward_feature_map(x)
            feats = model.pool(fmap)
            out["feature_map"].append(fmap[0].numpy())
            out["features"].append(feats[0].numpy())
            out["logits"].append(model.head(feats)[0].numpy())
    return {k: np.stack(v) for k, v in out.items()}


def forward_bounds(model: TinyNet, source: Source, rows: Sequence[int]) -> dict[str, np.ndarray]:
    """Per entry, how far two float32 forward passes of ``model`` on ``rows`` may differ.

    Batched or one image at a time, on another CPU's kernels or thread count, the convolutions
    and the head sum in other orders. Each layer's output is off by at most ``gamma(n)`` times
    the sum of its ``n`` absolute terms (Higham, "Accuracy and Stability of Numerical
    Algorithms", §3.1; a convolution is a dot product per output entry, the bias one more
    term) plus its input's error through ``|W|``; ReLU does not enlarge an error and the mean
    pool adds ``gamma(36)``. Twice the bound of one pass (computed here in float64) bounds the
    difference of two.
    """
    from torch.nn import functional

    from tests._tolerance import U32, gamma

    conv1, conv2 = model.body[0], model.body[2]
    with torch.no_grad():
        x = torch.stack([model.transform(source.load(int(i))) for i in rows]).double()

        def layer(conv: nn.Conv2d, inputs: torch.Tensor, error: torch.Tensor) -> tuple:
            w, b = conv.weight.double(), conv.bias.double()
            terms = w[0].numel() + 1
            out = functional.conv2d(inputs, w, b, stride=conv.stride, padding=conv.padding)
            size = functional.conv2d(inputs.abs(), w.abs(), b.abs(), stride=conv.stride,
                                     padding=conv.padding)
            spread = functional.conv2d(error, w.abs(), None, stride=conv.stride, padding=conv.padding)
            return out.clamp(min=0), gamma(terms, U32) * size + spread

        h1, e1 = layer(conv1, x, torch.zeros_like(x))
        fmap, e2 = layer(conv2, h1, e1)
        cells = fmap.shape[2] * fmap.shape[3]
        feats = fmap.mean(dim=(2, 3))
        e_feats = e2.mean(dim=(2, 3)) + gamma(cells, U32) * feats
        w, b = model.fc.weight.double(), model.fc.bias.double()
        e_logits = e_feats @ w.abs().T + gamma(w.shape[1] + 1, U32) * (feats @ w.abs().T + b.abs())
    return {"feature_map": 2 * e2.numpy(), "features": 2 * e_feats.numpy(),
            "logits": 2 * e_logits.numpy()}



class CountingNet(TinyNet):
    """A :class:`TinyNet` that counts its forward passes over every process (one byte appended
    to the file ``counter`` per pass): for models that run in other processes (Ray workers).
    The same spec and weights as ``TinyNet()``, so the same cache key."""

    def __init__(self, counter: str | Path, **kwargs: Any):
        super().__init__(**kwargs)
        self.counter = str(counter)

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        with open(self.counter, "ab") as f:
            f.write(b".")
        self.passes_so_far(os.path.getsize(self.counter))
        return super().forward_feature_map(x)

    def passes_so_far(self, count: int) -> None:
        """Called with the number of forward passes so far, this one included."""


class KillOnceNet(CountingNet):
    """Its process SIGKILLs itself at the ``kill_at``-th forward pass over all processes, once:
    the process that creates ``counter + ".killed"`` is the one that dies."""

    def __init__(self, counter: str | Path, kill_at: int, **kwargs: Any):
        super().__init__(counter, **kwargs)
        self.kill_at = kill_at

    def passes_so_far(self, count: int) -> None:
        if count < self.kill_at:
            return
        try:
            os.close(os.open(self.counter + ".killed", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


class NanNet(CountingNet):
    """Its logits are NaN from the ``nan_at``-th forward pass over all processes on."""

    def __init__(self, counter: str | Path, nan_at: int, **kwargs: Any):
        super().__init__(counter, **kwargs)
        self.nan_at = nan_at

    def head(self, features: torch.Tensor) -> torch.Tensor:
        logits = super().head(features)
        if os.path.getsize(self.counter) >= self.nan_at:
            return torch.full_like(logits, float("nan"))
        return logits
