"""The optimiser settings of every training path: one type, :class:`OptimSettings`.

    optim = OptimSettings(epochs=30, lr=0.05)            # every field has a default (below)
    train(model, source, out="runs/x", optim=optim)      # fine-tuning (oodbench.train.train)
    train_head(acts, optim=HEAD)                          # a new head on cached features
    Recipe(optim=OptimSettings(epochs=3, warmup_fraction=0.2))   # the small-image recipe

The same type is what a training config's ``[train]`` table becomes
(``TrainSettings.optim()``), what an experiment's held-out tuning trains its variants with
(``tune = { ..., train = { epochs = 3 } }``) and what ``retrain="last_block"`` trains the last
block with. Each entry point starts from a named preset of this module and changes only the
fields it is given.

SGD (momentum 0.9, Nesterov with ``nesterov=True``) or AdamW; per-step schedule "cosine"
(after a linear warm-up),
"constant", or "step": the learning rate multiplied by ``step_factor`` at the start of each
epoch of ``milestones`` (PyTorch's ``MultiStepLR`` stepped once per epoch, as NPOS' official
recipe, :mod:`oodbench.train.method_defaults`). The cosine schedule is SGDR's single cycle (Loshchilov & Hutter, ICLR 2017,
arXiv 1608.03983) down to ``min_lr`` (0 unless given; DOE's official recipe ends at 1e-6):

    factor(s) = (s + 1) / W                                 for s < W (warm-up steps)
    factor(s) = f + (1 - f) * 0.5 * (1 + cos(pi * (s - W) / (S - W)))
                                      for W <= s < S (S = all steps, f = min_lr / lr)
    factor(s) = step_factor ** #{m in milestones: s >= m * steps per epoch}     ("step")

W = ``warmup_epochs`` x steps per epoch, or ``round(warmup_fraction x S)`` (at most one of
the two is non-zero).

Defaults (the fields of :class:`OptimSettings`, = :data:`FINETUNE`) and where they come from
(a loss with a published recipe -- cma, npos, doe, um, umap -- starts from its recipe instead:
:mod:`oodbench.train.method_defaults`):

* ``batch_size=128, lr=0.1, weight_decay=5e-4``, SGD with momentum 0.9: the CIFAR training
  setup of LogitNorm (Wei et al., ICML 2022, Sec. 4.1, and their code's ``train.py``), the
  paper behind several of oodbench's losses;
* ``epochs=10``: oodbench's choice for fine-tuning a trained network on a CPU-sized budget
  (``oodbench.train.train`` and the ``[train]`` table of a training config);
* ``schedule="cosine"``, no warm-up (``warmup_epochs=0, warmup_fraction=0``): oodbench's
  choice (one SGDR cycle, above);
* ``nesterov=False, min_lr=0``: plain momentum and a cosine down to 0, as SGDR; the recipes
  that state otherwise set them (DOE: both, NPOS: Nesterov).

The presets of the other entry points differ only where named:

* :data:`HEAD` (``train_head``): ``epochs=30, batch_size=256`` -- oodbench's choice: a linear
  head on cached features costs little per epoch, so it takes more, larger steps;
* :data:`LAST_BLOCK` (``retrain="last_block"`` tuning variants): ``batch_size=64, lr=0.01``
  -- oodbench's choice: the last block starts from trained weights, so smaller steps;
* :data:`RECIPE` (the default of ``oodbench.train.recipe.Recipe``): ``epochs=30,
  warmup_fraction=0.1`` -- oodbench's choice for training a small CIFAR ResNet from scratch:
  a CPU-sized epoch count, a linear warm-up over the first tenth of the steps (the recipe's
  named presets, ``RECIPES``, set their own).
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch

from oodbench.errors import InvalidInputError

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("cosine", "constant", "step")
SGD_MOMENTUM = 0.9


class DeprecatedArgumentWarning(FutureWarning):
    """A function was called with a keyword argument under its old spelling (it still works)."""


@dataclass(frozen=True)
class OptimSettings:
    """How to optimise: epochs, batch size, learning rate and its schedule, weight decay
    (defaults and their sources: see the module docstring)."""

    epochs: int = 10
    batch_size: int = 128
    lr: float = 0.1
    weight_decay: float = 5e-4
    optimizer: str = "sgd"
    schedule: str = "cosine"
    warmup_epochs: int = 0
    warmup_fraction: float = 0.0
    milestones: tuple[int, ...] = ()
    step_factor: float = 0.1
    nesterov: bool = False
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "milestones", tuple(self.milestones))
        if any(isinstance(m, bool) or not isinstance(m, int) or not 0 < m < self.epochs
               for m in self.milestones) or list(self.milestones) != sorted(set(self.milestones)):
            raise InvalidInputError(
                f"milestones must be increasing epochs in (0, epochs={self.epochs}); got "
                f"{list(self.milestones)!r} (a step at or after the last epoch would never be "
                "taken): give milestones below epochs, or another schedule ('cosine', "
                "'constant')")
        if (self.schedule == "step") != bool(self.milestones):
            raise InvalidInputError(
                "milestones go with schedule='step' (and it needs at least one); got "
                f"schedule={self.schedule!r}, milestones={list(self.milestones)!r}")
        if not self.step_factor > 0:
            raise InvalidInputError(f"step_factor must be > 0; got {self.step_factor!r}")
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
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise InvalidInputError(
                f"warmup_fraction must lie in [0, 1); got {self.warmup_fraction!r}")
        if self.warmup_epochs and self.warmup_fraction:
            raise InvalidInputError(
                "give the warm-up once: warmup_epochs or warmup_fraction (the other at 0); got "
                f"warmup_epochs={self.warmup_epochs}, warmup_fraction={self.warmup_fraction}")
        if not self.lr > 0:
            raise InvalidInputError(f"lr must be > 0; got {self.lr!r}")
        if not self.weight_decay >= 0:
            raise InvalidInputError(f"weight_decay must be >= 0; got {self.weight_decay!r}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidInputError(f"optimizer must be one of {OPTIMIZERS}; got {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            raise InvalidInputError(f"schedule must be one of {SCHEDULES}; got {self.schedule!r}")
        self._check_recipe_options()

    def _check_recipe_options(self) -> None:
        """``nesterov`` and ``min_lr``: each refused where it would change nothing."""
        if not isinstance(self.nesterov, bool):
            raise InvalidInputError(f"nesterov must be true or false; got {self.nesterov!r}")
        if self.nesterov and self.optimizer != "sgd":
            raise InvalidInputError(
                f"nesterov=True goes with optimizer='sgd' (Nesterov momentum); got "
                f"optimizer={self.optimizer!r}: drop nesterov or use SGD")
        if isinstance(self.min_lr, bool) or not isinstance(self.min_lr, int | float) or not (
                0.0 <= self.min_lr < self.lr):
            raise InvalidInputError(
                f"min_lr (where the cosine ends) must lie in [0, lr={self.lr}); got {self.min_lr!r}")
        if self.min_lr and self.schedule != "cosine":
            raise InvalidInputError(
                f"min_lr is where the cosine schedule ends; schedule={self.schedule!r} never "
                f"reaches it: drop min_lr (got {self.min_lr!r}) or use schedule='cosine'")

    def as_dict(self) -> dict[str, Any]:
        """The settings for a run's record. ``warmup_fraction``, ``nesterov`` and ``min_lr`` are
        left out at their defaults, and ``milestones`` / ``step_factor`` unless the schedule is
        "step" (they came later), so the records and cache keys of runs made before them still
        match."""
        out = asdict(self)
        out["milestones"] = list(self.milestones)
        for name in ("warmup_fraction", "nesterov", "min_lr"):
            if not out[name]:
                del out[name]
        if self.schedule != "step":
            del out["milestones"], out["step_factor"]
        return out

    def warmup_steps(self, steps_per_epoch: int) -> int:
        """W of the module docstring."""
        if self.warmup_epochs:
            return self.warmup_epochs * steps_per_epoch
        return int(round(self.warmup_fraction * (self.epochs * steps_per_epoch)))

    def make_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=SGD_MOMENTUM,
                                   weight_decay=self.weight_decay, nesterov=self.nesterov)
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)

    def make_scheduler(
        self, optimizer: torch.optim.Optimizer, steps_per_epoch: int, warmup: int | None = None
    ) -> torch.optim.lr_scheduler.LambdaLR:
        """The per-step schedule of the module docstring; ``warmup``: W in optimisation steps
        when the method states it itself (CMA's loss option), else from these settings."""
        total = self.epochs * steps_per_epoch
        warmup = self.warmup_steps(steps_per_epoch) if warmup is None else warmup
        boundaries = tuple(m * steps_per_epoch for m in self.milestones)
        floor = self.min_lr / self.lr
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, total, warmup, self.schedule,
                                              boundaries, self.step_factor, floor)
        )


#: the field names of :class:`OptimSettings`
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(OptimSettings))
#: the presets of the module docstring
FINETUNE = OptimSettings()
HEAD = OptimSettings(epochs=30, batch_size=256)
LAST_BLOCK = OptimSettings(batch_size=64, lr=0.01)
RECIPE = OptimSettings(epochs=30, warmup_fraction=0.1)


def from_options(options: Mapping[str, Any], default: OptimSettings
                 ) -> tuple[OptimSettings, dict[str, Any]]:
    """(``default`` with the optimiser fields of a flat options mapping applied, the mapping's
    other keys): how a flat table such as a tuning entry's ``train = {...}`` becomes settings."""
    optim = {k: v for k, v in options.items() if k in FIELDS}
    return replace(default, **optim), {k: v for k, v in options.items() if k not in FIELDS}


def resolve(optim: OptimSettings | None, default: OptimSettings, legacy: Mapping[str, Any],
            who: str) -> OptimSettings:
    """The settings an entry point runs with: ``optim``, else ``default``, with the deprecated
    flat keywords (``epochs=``, ``lr=``, ...) applied to ``default`` with a
    :class:`DeprecatedArgumentWarning`. Any other keyword is a ``TypeError`` (did-you-mean)."""
    unknown = sorted(set(legacy) - set(FIELDS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], (*FIELDS, "optim"), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"{who}() got an unexpected keyword argument {unknown[0]!r}{hint}")
    if not legacy:
        return default if optim is None else optim
    if optim is not None:
        raise InvalidInputError(
            f"{who}: give the optimiser settings once: optim=OptimSettings(...) or the "
            f"deprecated keywords {sorted(legacy)}, not both")
    given = ", ".join(f"{k}={v!r}" for k, v in legacy.items())
    warnings.warn(f"{who}({given}) is deprecated; pass optim=OptimSettings({given}) "
                  "(oodbench.train.OptimSettings)", DeprecatedArgumentWarning, stacklevel=3)
    return replace(default, **legacy)


def lr_factor(step: int, total: int, warmup: int, schedule: str,
              boundaries: tuple[int, ...] = (), step_factor: float = 0.1,
              floor: float = 0.0) -> float:
    """The multiplier of the base learning rate at optimisation step ``step`` (see module);
    ``boundaries``: the "step" schedule's milestones in optimisation steps; ``floor``: the
    cosine's end, as a share of the base rate (``min_lr / lr``)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        return float(step_factor ** sum(step >= b for b in boundaries))
    progress = (step - warmup) / max(total - warmup, 1)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
