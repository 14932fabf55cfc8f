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
import operator
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Annotated, Any

from oodbench.constraints import (
    BatchSize,
    Bool,
    Check,
    DeclaredFields,
    Integer,
    Interval,
    ListOf,
    NonNegative,
    Options,
    Positive,
)
from oodbench.errors import InvalidInputError

if TYPE_CHECKING:  # torch is imported where an optimiser is made: the settings alone are light
    import torch

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("cosine", "constant", "step")
SGD_MOMENTUM = 0.9


class DeprecatedArgumentWarning(FutureWarning):
    """A function was called with a keyword argument under its old spelling (it still works)."""


@dataclass(frozen=True)
class OptimSettings(DeclaredFields):
    """How to optimise: epochs, batch size, learning rate and its schedule, weight decay
    (defaults and their sources: see the module docstring).

    Each field declares its valid values and ``checks`` the rules between them, among which
    the refusal of a setting that would do nothing in its combination (``nesterov`` without
    SGD, ``min_lr`` without the cosine schedule, milestones without the step schedule, a step
    at or after the last epoch); they are validated once, on creation (also by
    ``dataclasses.replace``), with the uniform message of :mod:`oodbench.constraints`."""

    epochs: Annotated[int, Integer(min=1)] = 10
    batch_size: BatchSize = 128
    lr: Positive = 0.1
    weight_decay: NonNegative = 5e-4
    optimizer: Annotated[str, Options(*OPTIMIZERS)] = "sgd"
    schedule: Annotated[str, Options(*SCHEDULES)] = "cosine"
    warmup_epochs: Annotated[int, Integer(min=0)] = 0
    warmup_fraction: Annotated[float, Interval(0, 1, "left", note="of all steps")] = 0.0
    milestones: Annotated[tuple[int, ...], ListOf(
        Integer(min=1), min_items=0, increasing=True,
        note="the epochs at whose start the learning rate is multiplied by step_factor")] = ()
    step_factor: Positive = 0.1
    nesterov: Bool = False
    min_lr: Annotated[float, Interval(0, None, note="where the cosine ends")] = 0.0

    checks = (
        Check(("warmup_epochs", "epochs"), operator.lt, "warmup_epochs < epochs"),
        Check(("warmup_epochs", "warmup_fraction"), lambda epochs, fraction: not (
            epochs and fraction), "the warm-up given once: warmup_epochs or warmup_fraction, "
            "the other at 0"),
        Check(("milestones", "epochs"), lambda milestones, epochs: all(
            m < epochs for m in milestones), "every milestone < epochs (a step at or after the "
            "last epoch would never be taken): give milestones below epochs, or another "
            "schedule ('cosine', 'constant')"),
        Check(("schedule", "milestones"), lambda schedule, milestones: (
            schedule == "step") == bool(milestones), "milestones with schedule='step', and at "
            "least one with it"),
        Check(("nesterov", "optimizer"), lambda nesterov, optimizer: not nesterov or (
            optimizer == "sgd"), "nesterov=True only with optimizer='sgd' (Nesterov momentum): "
            "drop nesterov or use SGD"),
        Check(("min_lr", "lr"), operator.lt, "min_lr < lr"),
        Check(("min_lr", "schedule"), lambda min_lr, schedule: not min_lr or (
            schedule == "cosine"), "min_lr only with schedule='cosine' (where the cosine ends; "
            "another schedule never reaches it): drop min_lr or use schedule='cosine'"),
    )

    def declared_by(self) -> str:
        return "optimiser settings"

    def _settle(self) -> None:
        """``milestones`` as a tuple (a list given in a table stays hashable)."""
        object.__setattr__(self, "milestones", tuple(self.milestones))

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
        import torch

        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=SGD_MOMENTUM,
                                   weight_decay=self.weight_decay, nesterov=self.nesterov)
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)

    def make_scheduler(
        self, optimizer: torch.optim.Optimizer, steps_per_epoch: int, warmup: int | None = None
    ) -> torch.optim.lr_scheduler.LambdaLR:
        """The per-step schedule of the module docstring; ``warmup``: W in optimisation steps
        when the method states it itself (CMA's loss option), else from these settings."""
        import torch

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
