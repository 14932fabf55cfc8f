"""The plain classifier loop: every loss that names no method of its own (``ce``,
``logitnorm``, ``oe``, ...) trains with the loop of :mod:`oodbench.train.finetune` and the
default hooks, which add nothing."""

from __future__ import annotations

from oodbench.train.hooks import LoopHooks
from oodbench.train.method_registry import TrainingMethod, register

register(TrainingMethod("classifier", "the classifier loop over the model's head logits, no hooks",
                        LoopHooks))
