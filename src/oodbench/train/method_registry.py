"""Training methods as registry entries: how ``oodbench.train.train`` trains a given loss.

A loss names its method in ``Loss.method`` (a plain loss: ``"classifier"``, the one loop
without hooks).
Each method is one file of :mod:`oodbench.train.methods` that defines its behaviour and adds
its :class:`TrainingMethod` to :data:`METHODS` beside it; the registry imports every public
module of that package on its first read (:class:`oodbench.registry.Registry`'s ``builtins``,
as for detectors and losses), and :func:`method_of` is how a loss finds its method.

An entry declares its ``name``, what it ``needs`` from the run (``"clip"``: a CLIP model;
``"outliers"``: an outlier batch), its settings (the options of the losses it trains, derived
from the loss registry: ``oodbench list losses``) and its behaviour: a
:class:`~oodbench.train.hooks.LoopHooks` subclass (hooks into the one classifier loop of
:mod:`oodbench.train.finetune`) or a trainer function with a loop of its own (called as
``trainer(model, source, criterion, settings, out=, seed=, resume=, device=, amp=,
num_workers=, transform=, progress=)``; it returns a :class:`~oodbench.train.result.TrainResult`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oodbench.losses.base import LOSSES, Loss, available
from oodbench.registry import Registry
from oodbench.train.hooks import LoopHooks

#: what a training method may need from the run
NEEDS = frozenset({"clip", "outliers"})


@dataclass(frozen=True)
class TrainingMethod:
    """One registry entry (see the module docstring)."""

    name: str
    description: str
    #: a :class:`~oodbench.train.hooks.LoopHooks` subclass (the classifier loop's methods) or a
    #: trainer function (a method with its own loop)
    behaviour: type[Any] | Callable[..., Any]
    needs: frozenset[str] = frozenset()

    @property
    def own_loop(self) -> bool:
        """Whether the method trains with a loop of its own (a trainer), not with hooks into
        the classifier loop (a :class:`~oodbench.train.hooks.LoopHooks` subclass)."""
        return not (isinstance(self.behaviour, type) and issubclass(self.behaviour, LoopHooks))

    @property
    def losses(self) -> tuple[str, ...]:
        """The losses that name this method, sorted."""
        return tuple(sorted(name for name, cls in LOSSES.items()
                            if method_name(cls) == self.name))

    @property
    def settings(self) -> tuple[str, ...]:
        """The options of the losses it trains, as ``loss.option`` (what a run of it sets)."""
        rows = {row["name"]: row for row in available()}
        return tuple(f"{loss}.{option}" for loss in self.losses
                     for option in rows[loss]["defaults"])


#: every training method, by the name a loss gives (``Loss.method``); the
#: built-in ones are the files of :mod:`oodbench.train.methods`
METHODS: Registry[TrainingMethod] = Registry(
    "training method", declares=("needs", NEEDS), builtins="oodbench.train.methods")


def register(method: TrainingMethod) -> TrainingMethod:
    """Add ``method`` to :data:`METHODS` (a method file's last line) and return it."""
    METHODS.add(method)
    return method


def method_name(loss: type[Loss] | Loss) -> str:
    """The name of the method a loss names (``Loss.method``)."""
    return loss.method


def method_of(loss: type[Loss] | Loss) -> TrainingMethod:
    """The training method a loss names (``UnknownNameError`` for a name no method has)."""
    return METHODS.lookup(method_name(loss))
