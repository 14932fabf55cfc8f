"""The ``Loss`` contract and the registry every loss file registers into.

A loss is a small ``nn.Module`` whose constructor keywords are its hyper-parameters:

    loss = oodbench.losses.create("logitnorm", tau=0.04)
    value = loss(logits, labels)                       # a scalar: the batch mean
    value = loss(logits, labels, outlier_logits)       # Outlier Exposure also sees outliers

``head_outputs(num_classes)`` is the width the classifier head must have for this loss (MOS
adds one "others" output per group). Every loss checks, before any maths, that the labels lie
in ``[0, num_classes)`` and that an outlier batch is given exactly when it needs one.

A training method also declares what of a training run it would leave unused
(``unused_settings``) and which of its options switch part of it on at an epoch
(``switch_epochs``); :mod:`oodbench.train.method_settings` refuses a run in which either would
make a setting a silent no-op.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from oodbench.errors import ClassCountMismatchError, InvalidInputError
from oodbench.registry import Registry, summary


@dataclass(frozen=True)
class SwitchEpoch:
    """A loss option naming the epoch (0-based) from which part of the method switches on:
    ``what`` switches on then; ``before`` is what the run is until then; ``official`` the
    official recipe's values (for the error message of a run that would never switch it on)."""

    what: str
    before: str
    official: str


class Loss(nn.Module):
    """Base class: subclasses set ``name`` and ``paper`` and implement ``_loss``.

    Class attributes:
        name: registry name (``"hem"``).
        paper: the citation (authors, venue, year, arXiv id).
        needs_outliers: ``True`` when training needs a batch of outlier images as well
            (Outlier Exposure).
        hooks: what the training loop adds for this loss (:mod:`oodbench.train.hooks`: ``"um"``,
            ``"umap"``, ``"doe"``); ``""`` for a plain loss.
        trainer: the training path of ``oodbench.train`` that runs this loss: ``"classifier"``
            (the loop over the model's head logits, :mod:`oodbench.train.finetune`, with its
            ``hooks``), or ``"cma"`` / ``"npos"``: CLIP fine-tuning with a loop of its own
            (text tower, cached frozen blocks; :mod:`oodbench.train.cma` / ``npos``).
        unused_settings: training settings (``oodbench.train.train``'s keywords and the fields
            of ``OptimSettings``) this method does not use, each with what it does instead; a
            value other than the setting's default is refused before training. ``outliers``
            and ``outlier_batch_size`` are unused by every loss without ``needs_outliers``
            (:func:`oodbench.train.method_settings.unused_settings`).
        switch_epochs: the options naming the epoch from which part of the method switches on
            (:class:`SwitchEpoch`); a value >= the run's epochs is refused before training.
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    needs_outliers: ClassVar[bool] = False
    hooks: ClassVar[str] = ""
    trainer: ClassVar[str] = "classifier"
    unused_settings: ClassVar[Mapping[str, str]] = {}
    switch_epochs: ClassVar[Mapping[str, SwitchEpoch]] = {}

    @property
    def hyperparams(self) -> dict[str, Any]:
        """The constructor keywords this loss runs with (read back from its attributes)."""
        params = inspect.signature(type(self).__init__).parameters
        return {k: getattr(self, k) for k in params if k != "self" and hasattr(self, k)}

    def head_outputs(self, num_classes: int) -> int:
        """How many outputs the head needs for ``num_classes`` classes (default: one each)."""
        return num_classes

    def forward(
        self, logits: torch.Tensor, labels: torch.Tensor, outlier_logits: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mean loss over the batch (a scalar tensor)."""
        self.check_labels(labels, self.num_classes_of(logits))
        if self.needs_outliers and outlier_logits is None:
            raise InvalidInputError(
                f"loss {self.name!r} needs a batch of outlier images: give an outlier source "
                "(outliers=... / [outliers] in the training config)"
            )
        return self._loss(logits, labels.long(), outlier_logits)

    def num_classes_of(self, logits: torch.Tensor) -> int:
        """The number of ID classes a head of width ``logits.shape[1]`` serves."""
        if logits.ndim != 2:
            raise InvalidInputError(
                f"loss {self.name!r}: logits must be 2-D (batch, outputs); got {tuple(logits.shape)}"
            )
        return self.classes_for_width(int(logits.shape[1]))

    def classes_for_width(self, width: int) -> int:
        """The number of ID classes a head with ``width`` outputs serves (default: ``width``)."""
        return width

    def check_labels(self, labels: torch.Tensor, num_classes: int) -> None:
        """``ClassCountMismatchError`` when a label lies outside ``[0, num_classes)``."""
        if not labels.numel():
            return
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise ClassCountMismatchError(
                f"loss {self.name!r}: label {low if low < 0 else high} lies outside the head's "
                f"{num_classes} classes [0, {num_classes}); give the head as many outputs as there "
                "are classes, or keep only the head's classes (classes=...)"
            )

    @abstractmethod
    def _loss(
        self, logits: torch.Tensor, labels: torch.Tensor, outlier_logits: torch.Tensor | None
    ) -> torch.Tensor:
        """The batch mean, on validated inputs."""


# -- registry -------------------------------------------------------------------------------
_REGISTRY: Registry[type[Loss]] = Registry(
    "loss", builtins="oodbench.losses")
#: every loss, by name (the registry; ``register`` adds to it)
LOSSES = _REGISTRY
L = TypeVar("L", bound=type[Loss])


def register(cls: L) -> L:
    """Class decorator: add a loss to the registry under ``cls.name``."""
    _REGISTRY.add(cls)
    return cls


def loss_class(name: str) -> type[Loss]:
    """The registered class for ``name`` (``UnknownNameError`` with the closest names)."""
    return _REGISTRY.lookup(name)


def create(name: str, **options: Any) -> Loss:
    """Build a loss by registry name, e.g. ``create("oe", weight=0.5)``."""
    cls = loss_class(name)
    valid = [k for k in inspect.signature(cls.__init__).parameters if k != "self"]
    wrong = sorted(set(options) - set(valid))
    if wrong:
        raise InvalidInputError(
            f"loss {name!r} has no option {', '.join(wrong)}; it takes {', '.join(valid) or 'none'}"
        )
    return cls(**options)


def available() -> list[dict[str, Any]]:
    """One entry per registered loss: name, options with defaults, paper, first doc line."""
    rows = []
    for name, cls in sorted(_REGISTRY.items()):
        params = inspect.signature(cls.__init__).parameters
        defaults = {k: (None if p.default is inspect.Parameter.empty else p.default)
                    for k, p in params.items() if k != "self"}
        rows.append({"name": name, "defaults": defaults, "paper": cls.paper,
                     "needs_outliers": cls.needs_outliers,
                     "summary": summary(cls)})
    return rows
