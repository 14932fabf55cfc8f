"""The ``Loss`` contract and the registry every loss file registers into.

A loss is a small ``nn.Module`` whose dataclass fields are its hyper-parameters (its options),
each declaring its valid values as data (:mod:`oodbench.constraints`, as a detector's)::

    @register
    class LogitNorm(Loss):
        name = "logitnorm"
        tau: Positive = 0.04          # Annotated[float, Interval(0, None, "neither")]

    loss = oodbench.losses.create("logitnorm", tau=0.04)
    value = loss(logits, labels)                       # a scalar: the batch mean
    value = loss(logits, labels, outlier_logits)       # Outlier Exposure also sees outliers

Every subclass is a dataclass (``Loss`` makes it one: no decorator to forget) whose generated
``__init__`` validates the options once, against their declarations and the class's ``checks``
(the uniform one-line error of :mod:`oodbench.constraints`), before anything trains;
``create`` explains an unknown option with the closest ones, and ``oodbench list losses``
shows each option's valid values from the same declarations.

``head_outputs(num_classes)`` is the width the classifier head must have for this loss (MOS
adds one "others" output per group). Every loss checks, before any maths, that the labels lie
in ``[0, num_classes)`` and that an outlier batch is given exactly when it needs one.

A training method also declares what of a training run it would leave unused
(``unused_settings``) and which of its options switch part of it on at an epoch
(``switch_epochs``); :mod:`oodbench.train.method_settings` refuses a run in which either would
make a setting a silent no-op.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, dataclass_transform

import torch
from torch import nn

from oodbench.constraints import (
    Declared,
    DeclaredFields,
    declarations,
    described,
    is_number,
    undeclared,
    unknown_names,
)
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


@dataclass_transform(eq_default=False)
class Loss(DeclaredFields, nn.Module):
    """Base class: subclasses set ``name`` and ``paper``, declare their options as fields and
    implement ``_loss``.

    Each subclass becomes a dataclass (``eq=False``: a module stays hashable; nn.Module's
    ``repr``) on its definition; its options are validated against their declarations and
    ``checks`` (:class:`~oodbench.constraints.Check`) when it is created, and derived state (a
    sub-module, a layout) is built in ``_setup``, on validated values.

    Class attributes:
        name: registry name (``"hem"``).
        paper: the citation (authors, venue, year, arXiv id).
        needs_outliers: ``True`` when training needs a batch of outlier images as well
            (Outlier Exposure).
        method: the training method that trains this loss (a file of
            :mod:`oodbench.train.methods`, ``oodbench list methods``): ``"classifier"`` (the one
            loop over the model's head logits, no hooks; every plain loss), a method that adds
            hooks to that loop (``"um"``, ``"umap"``, ``"doe"``), or one with a loop of its own
            (``"cma"``, ``"npos"``: CLIP fine-tuning).
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
    method: ClassVar[str] = "classifier"
    unused_settings: ClassVar[Mapping[str, str]] = {}
    switch_epochs: ClassVar[Mapping[str, SwitchEpoch]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(eq=False, repr=False)(cls)

    def declared_by(self) -> str:
        return f"loss {self.name!r}"

    def _settle(self) -> None:
        """Initialise the module, hold each number as its declared type (``weight=1`` runs and
        is recorded as ``1.0``), then :meth:`_setup`."""
        nn.Module.__init__(self)
        cls: type = type(self)
        for name, declared in declarations(cls).items():
            object.__setattr__(self, name, as_declared(getattr(self, name), declared))
        self._setup()

    def _setup(self) -> None:  # noqa: B027 - optional hook
        """Override to build what the loss derives from its validated options."""

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.hyperparams.items())

    @property
    def hyperparams(self) -> dict[str, Any]:
        """The options this loss runs with (its fields, in declaration order)."""
        return {name: getattr(self, name) for name in option_names(type(self))}

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


def as_declared(value: Any, declared: Declared) -> Any:
    """``value`` as the number type its field declares: a number of a ``float`` field as a
    Python float, an integer of an ``int`` field as a Python int; anything else unchanged."""
    kinds = declared.type.split(" | ")
    if "float" in kinds and is_number(value):
        return float(value)
    if kinds[0] == "int" and is_number(value) and float(value).is_integer():
        return int(value)
    return value


def option_names(cls: type[Loss]) -> tuple[str, ...]:
    """The options of loss class ``cls`` (its dataclass fields), in declaration order."""
    options: Any = cls  # every subclass of Loss is a dataclass (Loss.__init_subclass__)
    return tuple(f.name for f in dataclasses.fields(options) if f.init)


def _undeclared_options(cls: type[Loss]) -> tuple[str, ...]:
    """The options of ``cls`` that declare no valid values (the registry refuses them); a
    class made unhashable by an explicit ``@dataclass`` (``eq=True``) is refused too."""
    if cls.__hash__ is None:
        raise TypeError(f"{cls.__name__}: @dataclass with eq=True makes a module unhashable; "
                        "leave the decorator out (Loss makes every subclass a dataclass)")
    return undeclared(cls)


# -- registry -------------------------------------------------------------------------------
_REGISTRY: Registry[type[Loss]] = Registry(
    "loss", undeclared=_undeclared_options, builtins="oodbench.losses")
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
    """Build a loss by registry name, e.g. ``create("oe", weight=0.5)``: an unknown option gets
    the closest ones, a value outside its declaration the uniform one-line error."""
    cls = loss_class(name)
    wrong = unknown_names(f"loss {name!r}", options, option_names(cls), noun="option")
    if wrong:
        raise InvalidInputError(wrong)
    return cls(**options)


def available() -> list[dict[str, Any]]:
    """One entry per registered loss: name, options with defaults, the valid values of each
    option (``ranges``, from its declaration) and the checks between them (``checks``), paper,
    whether it needs outliers, first doc line."""
    rows = []
    for name, cls in sorted(_REGISTRY.items()):
        declared = declarations(cls)
        rows.append({"name": name,
                     "defaults": {n: declared[n].default if n in declared else None
                                  for n in option_names(cls)},
                     **described(declared, cls.checks), "paper": cls.paper,
                     "needs_outliers": cls.needs_outliers, "summary": summary(cls)})
    return rows
