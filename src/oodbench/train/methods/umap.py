"""Unleashing Mask with pruning (loss ``umap``) in the training loop: masks on the trained
part's weights (:mod:`oodbench.train.masks`), of which only the scores train, baked into the
weights after the last epoch; the loss constraint as UM's (:mod:`oodbench.train.methods.um`).
The loss and its formula: :mod:`oodbench.losses.umap`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from oodbench.models.classifier import Classifier
from oodbench.train import masks
from oodbench.train.checkpoint import read_method_state
from oodbench.train.hooks import Run
from oodbench.train.method_registry import TrainingMethod, register
from oodbench.train.methods.um import UMHooks


class UMAPHooks(UMHooks):
    """UMAP: masks on the trained part's weights; only their scores train; baked at the end."""

    def prepare(self, run: Run) -> dict[str, Any]:
        criterion: Any = self.criterion
        if not any(masks.maskable_layers(m) for m in run.modules):
            masks.attach(run.modules, criterion.keep, run.seed, f"loss {criterion.name!r}")  # raises
        extra = super().prepare(run)  # estimated on the unmasked model, as the official code
        self.masks = masks.attach(run.modules, criterion.keep, run.seed, f"loss {criterion.name!r}")
        return extra

    def parameters(self, params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        for p in params:
            p.requires_grad_(False)
        scores = [m.scores for m in self.masks]
        for s in scores:
            s.requires_grad_(True)
        return scores

    def load(self, net: torch.nn.Module, weights: dict[str, torch.Tensor], out: Path) -> None:
        state = read_method_state(out)
        with torch.no_grad():
            for i, mask in enumerate(self.masks):
                mask.scores.copy_(state[f"scores.{i}"])

    def weights(self, net: torch.nn.Module) -> dict[str, torch.Tensor]:
        return masks.plain_state_dict(net)

    def state(self) -> dict[str, torch.Tensor]:
        return {f"scores.{i}": m.scores.detach() for i, m in enumerate(self.masks)}

    def finish(self, model: Classifier) -> None:
        masks.bake(model)


register(TrainingMethod("umap", "Unleashing Mask with pruning (loss umap): masks on the weights, "
                        "baked in after the last epoch", UMAPHooks))
