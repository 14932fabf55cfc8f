"""The transforms the ID fit data (an experiment's ``[id] fit``) may be read with, by name.

Detectors that learn statistics from the ID training set (KNN's bank, Mahalanobis' and MOOD's
Gaussians, ...) read it, as a rule, through the model's evaluation transform: ``"eval"``, the
default. Some published protocols read it through a training augmentation instead; an
experiment says so with ``[id] fit_transform = "<name>"``::

    [id]
    fit = { folder = "/data/imagenet/train" }
    fit_transform = "mood_train"     # MOOD's ID statistics, as its official code extracts them

The transform is part of the activation cache key (``oodbench.extract``: its ``repr``), so the
fit data read another way is another forward pass, cached apart; the results record the name
(column ``fit_transform``) and ``oodbench published compare`` names it where a published row's
recipe states another. A training augmentation draws at random: a second extraction (a cache
miss, another machine) draws other crops, as the official code's own runs do.

This module is light (no torch): the experiment schema validates names with
:func:`check_fit_transform`; :func:`fit_transform` builds the transform for a loaded model.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oodbench.registry import Registry

#: the transform of the fit data unless told otherwise: the model's own evaluation transform
DEFAULT_FIT_TRANSFORM = "eval"


@dataclass(frozen=True)
class FitTransform:
    """A named way of reading the fit data.

    Attributes:
        name: how an experiment names it.
        description: what it is, in one line.
        source: where the published protocol that uses it is written (official code file:line).
        build: ``"module:function"`` that takes the loaded model and returns the transform;
            ``""`` for the model's own evaluation transform.
    """

    name: str
    description: str
    source: str
    build: str = ""

    def transform(self, model: Any) -> Callable[..., Any]:
        """The transform for ``model`` (its own ``transform`` for ``build = ""``); an error of
        the builder (e.g. a model whose transform has no ``Normalize`` to take the mean and
        std from) propagates with its message."""
        if not self.build:
            return model.transform  # type: ignore[no-any-return]
        module, _, function = self.build.partition(":")
        return getattr(importlib.import_module(module), function)(model)  # type: ignore[no-any-return]


#: every fit transform, by name
FIT_TRANSFORMS: Registry[FitTransform] = Registry("fit transform")
FIT_TRANSFORMS.add(FitTransform(
    DEFAULT_FIT_TRANSFORM, "the model's own evaluation transform (its data config)",
    "oodbench's default"))
FIT_TRANSFORMS.add(FitTransform(
    "mood_train",
    "MOOD's fine-tuning augmentation (RandomResizedCrop 224 bicubic, RandAugment "
    "rand-m9-mstd0.5-inc1, colour jitter 0.4, random erasing 0.25) with the model's mean and std",
    "dvlab-research/MOOD MOODv1/eval_with_features.py:226, 240 (the training set, "
    "build_dataset(is_train=True)) -> datasets.py:216, 326-345 (build_transform(is_train=True)) "
    "with the defaults of eval_with_features.py:105-123",
    "oodbench.models.preprocessing:mood_train_transform"))


def check_fit_transform(name: str) -> str:
    """``name`` if it is a fit transform, else ``UnknownNameError`` listing the valid ones."""
    return FIT_TRANSFORMS.lookup(name).name


def fit_transform(model: Any, name: str) -> Callable[..., Any]:
    """The transform ``name`` for ``model`` (see :class:`FitTransform`)."""
    return FIT_TRANSFORMS.lookup(name).transform(model)
