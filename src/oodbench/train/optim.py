"""Optimiser and learning-rate schedule shared by every training path (head-only and full).

    SGD (momentum 0.9) or AdamW; per-step schedule "cosine" (after a linear warm-up) or
    "constant". The cosine schedule is SGDR's single cycle (Loshchilov & Hutter, ICLR 2017,
    arXiv 1608.03983) down to 0:

        factor(s) = (s + 1) / W                                 for s < W (warm-up steps)
        factor(s) = 0.5 * (1 + cos(pi * (s - W) / (S - W)))     for W <= s < S (S = all steps)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from oodbench.errors import InvalidInputError

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("cosine", "constant")
SGD_MOMENTUM = 0.9


@dataclass(frozen=True)
class OptimSettings:
    """How to optimise: epochs, batch size, learning rate and its schedule, weight decay."""

    epochs: int = 30
    batch_size: int = 256
    lr: float = 0.1
    weight_decay: float = 5e-4
    optimizer: str = "sgd"
    schedule: str = "cosine"
    warmup_epochs: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be a positive integer; got {value!r}")
        if isinstance(self.warmup_epochs, bool) or not isinstance(self.warmup_epochs, int) or not (
            0 <= self.warmup_epochs < self.epochs
        ):
            raise InvalidInputError(
                f"warmup_epochs must be an integer in [0, epochs={self.epochs}); got {self.warmup_epochs!r}"
            )
        if not self.lr > 0:
            raise InvalidInputError(f"lr must be > 0; got {self.lr!r}")
        if not self.weight_decay >= 0:
            raise InvalidInputError(f"weight_decay must be >= 0; got {self.weight_decay!r}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidInputError(f"optimizer must be one of {OPTIMIZERS}; got {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            raise InvalidInputError(f"schedule must be one of {SCHEDULES}; got {self.schedule!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def make_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=SGD_MOMENTUM,
                                   weight_decay=self.weight_decay)
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)

    def make_scheduler(
        self, optimizer: torch.optim.Optimizer, steps_per_epoch: int
    ) -> torch.optim.lr_scheduler.LambdaLR:
        total = self.epochs * steps_per_epoch
        warmup = self.warmup_epochs * steps_per_epoch
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, total, warmup, self.schedule)
        )


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """The multiplier of the base learning rate at optimisation step ``step`` (see module)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(total - warmup, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
