"""MC-dropout: the negative entropy of the mean softmax over stochastic dropout passes.

Gal & Ghahramani, "Dropout as a Bayesian Approximation: Representing Model Uncertainty in Deep
Learning", ICML 2016 (arXiv 1506.02142). The C-OOD paper's "MC dropout" kappa (Galil et al.,
ICLR 2023), with 30 passes.

With z^(t)(x) the logits of pass t (dropout layers in train mode, every other layer in eval
mode, so batch-norm keeps its running statistics):

    p_bar = (1/P) sum_t softmax(z^(t)(x))
    kappa = sum_c p_bar_c log p_bar_c          (negative entropy; higher = more ID)

Defaults: ``passes=30`` (C-OOD), ``seed=0``. The dropout masks come from torch's global RNG,
re-seeded for every batch from ``(seed, batch number)`` inside ``torch.random.fork_rng`` (the
caller's RNG state is untouched); the scores are reproducible for a given seed, batch size and
device.

Dropout is switched on in two forms: dropout layers (``nn.Dropout``, ``Dropout1d/2d/3d``,
``AlphaDropout``, ``FeatureAlphaDropout``) with p > 0, and the functional classifier dropout of
timm models (ResNet, EfficientNet, RegNet, DenseNet, ... apply ``F.dropout(x, drop_rate,
training=self.training)`` in ``forward_head``): every module with a ``drop_rate > 0`` attribute
gets its own ``training`` flag set (not its children's), so its dropout runs while batch-norm
keeps its running statistics. timm creates models with ``drop_rate=0``; load them with dropout,
e.g. ``oodbench.models.load("timm:resnet50", drop_rate=0.2)``. A model with neither form is an
error: its passes would all be identical.

Relation to pytorch-ood 0.4.0 ``MCD``: ``MCD.run_mean`` gives the same mean softmax p_bar (it
puts the whole model in train mode except batch-norm); its ``mean`` mode scores
``-max_c p_bar_c`` and its ``var`` mode the class-averaged variance, not the entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from oodbench.detectors._live import score_live
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations

DROPOUT_LAYERS = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def batch_seed(seed: int, batch: int) -> int:
    """The torch seed of the ``batch``-th batch: an independent stream per (seed, batch)."""
    return int(np.random.SeedSequence([seed, batch]).generate_state(1)[0])


def dropout_layers(model: nn.Module) -> list[nn.Module]:
    """The dropout modules of ``model`` with a drop probability above zero."""
    return [m for m in model.modules() if isinstance(m, DROPOUT_LAYERS) and m.p > 0]


def functional_dropout_modules(model: nn.Module) -> list[nn.Module]:
    """Modules applying dropout functionally from a ``drop_rate > 0`` attribute (timm heads)."""
    modules = []
    for m in model.modules():
        rate = getattr(m, "drop_rate", None)
        if isinstance(rate, (int, float)) and rate > 0:
            modules.append(m)
    return modules


@register
@dataclass
class MCDropout(Detector):
    """Negative entropy of the softmax averaged over passes with dropout switched on."""

    passes: int = 30
    seed: int = 0
    batch_size: int = 64
    device: str = "auto"

    name = "mc_dropout"
    requires = frozenset({"model"})
    paper = "Gal & Ghahramani, ICML 2016, arXiv 1506.02142"

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or self.passes < 1:
            raise InvalidInputError(f"MC-dropout passes must be a positive integer; got {self.passes!r}")

    def _fit(self, train: Activations | None, model: Any) -> None:
        if not dropout_layers(model) and not functional_dropout_modules(model):
            raise InvalidInputError(
                f"MC-dropout needs dropout with p > 0, and model "
                f"{getattr(model, 'spec', type(model).__name__)!r} has none: neither a dropout "
                "layer nor a timm drop_rate; load a timm model with dropout, e.g. "
                "oodbench.models.load('timm:resnet50', drop_rate=0.2), or use nn.Dropout layers"
            )
        self.model_ = model

    def _mean_softmax(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            total = torch.zeros((), dtype=torch.float64, device=x.device)
            for _ in range(self.passes):
                total = total + torch.softmax(self.model_(x).double(), dim=1)
        return total / self.passes

    def _score(self, acts: Activations) -> np.ndarray:
        model = self.model_
        was_training = model.training
        model.eval()
        for layer in dropout_layers(model):
            layer.train()
        for module in functional_dropout_modules(model):
            module.training = True  # this module's F.dropout only; its children stay in eval

        batches = iter(range(2**62))

        def batch_score(x: torch.Tensor) -> torch.Tensor:
            torch.manual_seed(batch_seed(self.seed, next(batches)))
            p = self._mean_softmax(x)
            return torch.special.xlogy(p, p).sum(dim=1)

        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        try:
            with torch.random.fork_rng(devices=devices):
                return score_live(
                    self.name, model, acts, batch_score, batch_size=self.batch_size,
                    device=self.device,
                )
        finally:
            model.train(was_training)
