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

**The C-OOD paper's ViTs** (``vit_drop_rate``). The paper's ``*_original`` ViTs are the original
Google ViT weights (Dosovitskiy et al., ImageNet-21k pre-trained, fine-tuned on ImageNet-1k) as
ported to timm 0.4.8, which the official code bundles (``utils/old_timm_lib``; model names
without the suffix there, e.g. ``vit_large_patch32_384``); they ran MC-dropout with dropout 0.1
("we gave dropout rate of 0.1", ``utils/misc.py``). In timm 0.4.x, ``drop_rate`` set the
dropout after the position embedding (``pos_drop``), after the attention projection
(``attn.proj_drop``) and after both MLP layers (one ``mlp.drop`` module, applied twice); the
head had none. In timm 1.x ``drop_rate`` sets only the head's dropout (``head_drop``), and those
sites are ``pos_drop_rate`` and ``proj_drop_rate`` (``attn.proj_drop``, ``mlp.drop1``,
``mlp.drop2``), so ``timm:vit_large_patch32_384`` with ``drop_rate=0.1`` is *not* the paper's
MC-dropout. ``vit_drop_rate=p`` sets p on exactly the old sites of every timm
``VisionTransformer`` in the model for the passes (restored afterwards; the attention-probability
dropout and the head stay off), which equals loading it with ``pos_drop_rate=p,
proj_drop_rate=p``; models that are not timm ViTs keep their own dropout. ``preset="cood"`` sets
30 passes and ``vit_drop_rate=0.1``. The timm 1.x weights of the ``*_original`` models:
``vit_base_patch16_224.orig_in21k_ft_in1k``, ``vit_base_patch16_384.orig_in21k_ft_in1k`` and
``vit_large_patch32_384.orig_in21k_ft_in1k``; ``vit_base_patch32_384``, ``vit_large_patch16_224``
and ``vit_large_patch16_384`` original fine-tuned weights have no timm 1.x tag (its weights of
those names are the later AugReg ones), and ``vit_small_patch16_224_original`` was a different
architecture (768-d, depth 8, Ross Wightman's own training) that timm 1.x no longer has.

Relation to pytorch-ood 0.4.0 ``MCD``: ``MCD.run_mean`` gives the same mean softmax p_bar (it
puts the whole model in train mode except batch-norm); its ``mean`` mode scores
``-max_c p_bar_c`` and its ``var`` mode the class-averaged variance, not the entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch
from torch import nn

from oodbench.constraints import BatchSize, Integer, Interval, Seed, Text
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


def legacy_vit_dropout_sites(model: nn.Module) -> list[nn.Dropout]:
    """The dropout modules that timm 0.4.x's ``drop_rate`` controlled in every timm
    ``VisionTransformer`` of ``model``: ``pos_drop``, and per block ``attn.proj_drop``,
    ``mlp.drop1`` and ``mlp.drop2`` (timm 0.4.x's single ``mlp.drop``, applied twice)."""
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError:  # pragma: no cover - timm is a dependency
        return []
    sites: list[nn.Dropout] = []
    for vit in (m for m in model.modules() if isinstance(m, VisionTransformer)):
        names = ["pos_drop"] + [
            f"blocks.{i}.{site}" for i in range(len(vit.blocks))
            for site in ("attn.proj_drop", "mlp.drop1", "mlp.drop2")
        ]
        found = dict(vit.named_modules())
        sites += [found[n] for n in names if isinstance(found.get(n), nn.Dropout)]
    return sites


@register
@dataclass
class MCDropout(Detector):
    """Negative entropy of the softmax averaged over passes with dropout switched on."""

    passes: Annotated[int, Integer(min=1, note="stochastic forward passes")] = 30
    seed: Seed = 0
    vit_drop_rate: Annotated[float | None, Interval(
        0, 1, "left", note="a dropout probability; None: the model's own dropout")] = None
    batch_size: BatchSize = 64
    device: Annotated[str, Text("'auto' or a torch device")] = "auto"

    name = "mc_dropout"
    requires = frozenset({"model"})
    paper = "Gal & Ghahramani, ICML 2016, arXiv 1506.02142"
    score_only_hyperparams = frozenset({"passes", "seed", "vit_drop_rate", "batch_size", "device"})

    def _fit(self, train: Activations | None, model: Any) -> None:
        vit_on = bool(self.vit_drop_rate) and bool(legacy_vit_dropout_sites(model))
        if not vit_on and not dropout_layers(model) and not functional_dropout_modules(model):
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
        vit_sites = legacy_vit_dropout_sites(model) if self.vit_drop_rate is not None else []
        saved_p = [site.p for site in vit_sites]
        for site in vit_sites:
            site.p = float(self.vit_drop_rate)  # type: ignore[arg-type]
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
            for site, p in zip(vit_sites, saved_p):
                site.p = p
