"""Training methods as registry entries: how ``oodbench.train.train`` trains a given loss.

A loss names its method (``Loss.hooks`` for a method that adds hooks to the classifier loop,
``Loss.trainer`` for one with a loop of its own; a plain loss trains with ``"classifier"``).
Each :class:`TrainingMethod` of :data:`METHODS` declares its ``name``, what it ``needs`` from
the run (``"clip"``: a CLIP model; ``"outliers"``: an outlier batch), its settings (those of the
losses it trains: ``oodbench list losses``) and its behaviour: the loop's hooks class or the
method's own trainer, as ``"module:attribute"``, imported on first use (listing the methods
imports no training code). :func:`method_of` is how a loss finds its method.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from oodbench.losses.base import Loss
from oodbench.registry import Registry

#: what a training method may need from the run
NEEDS = frozenset({"clip", "outliers"})


@dataclass(frozen=True)
class TrainingMethod:
    """One registry entry (see the module docstring)."""

    name: str
    description: str
    #: ``"module:attribute"``: a :class:`~oodbench.train.hooks.LoopHooks` subclass (the
    #: classifier loop's methods) or a trainer function (a method with its own loop)
    behaviour: str
    needs: frozenset[str] = frozenset()
    #: the settings are the losses' (each loss's options), not the method's
    settings: None = None

    def load(self) -> Any:
        """The behaviour, imported."""
        module, _, attribute = self.behaviour.partition(":")
        return getattr(importlib.import_module(module), attribute)


#: every training method, by the name a loss gives (``Loss.hooks`` / ``Loss.trainer``)
METHODS: Registry[TrainingMethod] = Registry("training method", declares=("needs", NEEDS))

for _method in (
    TrainingMethod("classifier", "the classifier loop over the model's head logits, no hooks",
                   "oodbench.train.hooks:LoopHooks"),
    TrainingMethod("um", "Unleashing Mask (loss um): the loss held at a constraint estimated "
                   "before the first epoch", "oodbench.train.unleashing_mask:UMHooks"),
    TrainingMethod("umap", "Unleashing Mask with pruning (loss umap): masks on the weights, baked "
                   "in after the last epoch", "oodbench.train.unleashing_mask:UMAPHooks"),
    TrainingMethod("doe", "DOE (loss doe): a perturbation of the weights in each optimisation "
                   "step, with outliers", "oodbench.train.doe:DOEHooks",
                   frozenset({"outliers"})),
    TrainingMethod("cma", "CLIP fine-tuning with CMA's own loop (text tower, cached frozen "
                   "blocks)", "oodbench.train.cma:train_cma", frozenset({"clip"})),
    TrainingMethod("npos", "CLIP fine-tuning with NPOS's own loop (synthesised outliers)",
                   "oodbench.train.npos:train_npos", frozenset({"clip"})),
):
    METHODS.add(_method)


def method_of(loss: type[Loss] | Loss) -> TrainingMethod:
    """The training method a loss names (``UnknownNameError`` for a name no method has)."""
    return METHODS.lookup(loss.hooks or loss.trainer)
