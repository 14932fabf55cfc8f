"""The demo's trainer: :class:`~oodbench.models.small_cnn.SmallCNN` on (N, 8, 8) grey images,
Adam and cross-entropy, on the one training loop (:mod:`oodbench.train.loop`).

It lives in ``train/`` (the model in ``models/``): training code sits above the models in the
layers of docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models.small_cnn import SIZE, SmallCNN
from oodbench.train.loop import StepResult, TrainLoop, batch_slices


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
