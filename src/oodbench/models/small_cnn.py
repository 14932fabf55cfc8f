"""A small CNN for 8x8 grey images (scikit-learn's digits), trained in seconds on a CPU.

Used by the offline demo and by tests that need a real trained classifier without downloads.
It has every part the detectors look at::

    x (1, 8, 8) ─► conv 16 ─► conv 32 ─► max-pool ─► conv ``width`` ─► feature map (width, 4, 4)
                 ─► global average pool ─► dropout ─► features (width,) ─► linear head ─► logits

All activations before the head are ReLU outputs (non-negative, as ReAct, ASH and DICE
assume); the dropout layer is the one MC-dropout switches on at test time. Training is
deterministic for a given seed (seeded initialisation and shuffling, single-process CPU maths).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models.classifier import Classifier

#: the input side length (sklearn's digits are 8x8)
SIZE = 8


def to_tensor(image: Image.Image) -> torch.Tensor:
    """PIL image -> (1, 8, 8) float tensor in [0, 1] (grey, bilinear resize when not 8x8)."""
    grey = image.convert("L")
    if grey.size != (SIZE, SIZE):
        grey = grey.resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.asarray(grey, dtype=np.float32) / 255.0).unsqueeze(0)


class SmallCNN(Classifier):
    """Three conv layers, global average pooling, dropout and a linear head.

    Args:
        num_classes: the number of output classes.
        width: channels of the last conv layer (= feature dimension D).
        dropout: drop probability before the head (active only in train mode / MC-dropout).
        seed: seed of the weight initialisation (does not touch the global RNG).
        class_names: optional names of the classes.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        width: int = 64,
        dropout: float = 0.25,
        seed: int = 0,
        class_names: Sequence[str] | None = None,
    ):
        super().__init__()
        if num_classes < 2:
            raise InvalidInputError(f"SmallCNN needs at least 2 classes, got {num_classes}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.body = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(32, width, 3, padding=1), nn.ReLU(),
            )
            self.dropout = nn.Dropout(dropout)
            self.fc = nn.Linear(width, num_classes)
        self.num_classes = num_classes
        self.class_names = list(class_names) if class_names is not None else None
        self.spec = f"oodbench:small_cnn(num_classes={num_classes},width={width})"
        self.transform = to_tensor
        self.eval()

    def forward_feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def pool(self, feature_map: torch.Tensor) -> torch.Tensor:
        return self.dropout(feature_map.mean(dim=(2, 3)))

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
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


def train_small_cnn(
    images: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int | None = None,
    epochs: int = 40,
    batch_size: int = 64,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    class_names: Sequence[str] | None = None,
    **model_options: float,
) -> SmallCNN:
    """Train a :class:`SmallCNN` with Adam and cross-entropy; returns it in eval mode.

    Args:
        images: (N, 8, 8) grey images, uint8 in [0, 255] or float in [0, 1] (the same scale
            ``to_tensor`` produces from PIL images, so training and evaluation inputs match).
        labels: (N,) int class indices in ``[0, num_classes)``.
    """
    x = np.asarray(images)
    if x.ndim != 3 or x.shape[1:] != (SIZE, SIZE):
        raise InvalidInputError(f"train_small_cnn expects images of shape (N, 8, 8); got {x.shape}")
    y = np.asarray(labels, dtype=np.int64)
    if len(y) != len(x):
        raise InvalidInputError(f"{len(x)} images but {len(y)} labels")
    k = int(num_classes if num_classes is not None else y.max() + 1)
    if y.min() < 0 or y.max() >= k:
        raise InvalidInputError(f"labels must lie in [0, {k}); got [{y.min()}, {y.max()}]")
    xt = torch.from_numpy(x.astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0))
    xt = xt.unsqueeze(1)
    yt = torch.from_numpy(y)
    model = SmallCNN(k, seed=seed, class_names=class_names, **model_options)  # type: ignore[arg-type]
    from oodbench.train.loop import StepResult, TrainLoop, batch_slices

    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    loop: TrainLoop[torch.Tensor] = TrainLoop(optimiser, None, list(model.parameters()), epochs)

    def step(epoch: int, index: int, idx: torch.Tensor) -> StepResult:
        loss = loss_fn(model(xt[idx]), yt[idx])
        loop.step(loss)
        return StepResult(loss.detach(), len(idx))

    model.train()
    loop.run(lambda epoch: batch_slices(torch.randperm(len(xt), generator=generator), batch_size),
             step, lambda t: {"epoch": t.epoch + 1, "loss": float(t.loss_sum) / t.seen},
             torch_seed=seed)  # dropout masks
    return model.eval()
