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
