"""DOE's optimisation step in the training loop (the formulas: :mod:`oodbench.losses.doe`).

    perturbation(runner, x, n_in, params)  P_new for every weight matrix (the scale-gradient step)
    DOEHooks.step                          warm-up: CE + OE; then OE at theta + gamma P,
                                           theta restored exactly, CE at theta

The hook of the one training loop (:mod:`oodbench.train.loop`): its three optimiser steps per
batch go through :func:`oodbench.train.loop.optimise` (gradient clipping, the float16 scaler),
the perturbation's gradient through :func:`oodbench.train.loop.backward`.

As the official proxy (QizhouWang/DOE doe_final.py:144, ``WideResNet(..., dropRate=0)``, put in
train mode at line 161, so BatchNorm uses the batch's statistics), the perturbation pass runs
with every dropout and drop-path module off and BatchNorm as the loop has it; and only the
parameters the official ``diff_in_weights`` moves are perturbed (utils/utils_awp.py:13-15:
more than one dimension *and* ``"weight"`` in the parameter's name), so a ViT's ``pos_embed``
and ``cls_token`` stay where they are (:func:`perturbed_parameters`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from oodbench.losses.oe import uniform_cross_entropy
from oodbench.train.checkpoint import read_method_state
from oodbench.train.hooks import Batch, LoopHooks
from oodbench.train.loop import backward, optimise
from oodbench.train.method_registry import TrainingMethod, register

#: added to the norm of a direction before rescaling (the official EPS)
EPS = 1e-20


def scale_gradient(outlier_logits: torch.Tensor) -> torch.Tensor:
    """``d/ds mean_out(mean_c s z_c - logsumexp(s z))`` at ``s = 1``: ``mean(mean_c z - sum_c p_c z_c)``."""
    z = outlier_logits.float()
    return (z.mean(dim=1) - (torch.softmax(z, dim=1) * z).sum(dim=1)).mean()


def _buffers(module: torch.nn.Module) -> list[torch.Tensor]:
    return [b for b in module.buffers()]


def perturbed_parameters(runner: torch.nn.Module, params: list[torch.nn.Parameter]
                         ) -> list[torch.nn.Parameter]:
    """The parameters of ``params`` DOE perturbs, in ``params``' order: those with more than one
    dimension whose name in ``runner`` contains ``"weight"`` (utils/utils_awp.py:13-15)."""
    named = {id(p) for name, p in runner.named_parameters() if p.ndim >= 2 and "weight" in name}
    return [p for p in params if id(p) in named]


#: timm's random-drop modules that are not ``nn.Dropout``s (stochastic depth, token and block
#: dropping); in eval mode each is the identity
TIMM_DROP_MODULES = frozenset({"DropPath", "PatchDropout", "DropBlock2d"})


def _is_dropout(module: torch.nn.Module) -> bool:
    """Dropout of any kind, and timm's :data:`TIMM_DROP_MODULES`."""
    return (isinstance(module, torch.nn.modules.dropout._DropoutNd)
            or type(module).__name__ in TIMM_DROP_MODULES)


@contextmanager
def dropout_off(runner: torch.nn.Module) -> Iterator[None]:
    """Every dropout / drop-path module of ``runner`` in eval mode for the block (the official
    proxy has ``dropRate=0``); the others keep their mode (BatchNorm stays in train mode)."""
    switched = [m for m in runner.modules() if _is_dropout(m) and m.training]
    for m in switched:
        m.eval()
    try:
        yield
    finally:
        for m in switched:
            m.train()


def perturbation(
    runner: torch.nn.Module, x: torch.Tensor, n_in: int, weights: list[torch.nn.Parameter],
    share: float = 1.0,
) -> list[torch.Tensor]:
    """``P_W = ||W|| / (||D_W|| + EPS) * D_W`` with ``D_W = -d g^2 / d W`` for each of ``weights``
    (``g``: :func:`scale_gradient` of the outlier rows ``x[n_in:]``), with dropout off. BatchNorm
    running statistics are left as they were (the official code runs this pass on a proxy
    copy)."""
    saved = [b.detach().clone() for b in _buffers(runner)]
    for w in weights:
        w.grad = None
    with dropout_off(runner):
        logits = runner(x)
    backward(scale_gradient(logits[n_in:]) ** 2 * share)
    with torch.no_grad():
        for b, old in zip(_buffers(runner), saved):
            b.copy_(old)
        out = []
        for w in weights:
            d = -w.grad if w.grad is not None else torch.zeros_like(w)
            out.append(w.norm() / (d.norm() + EPS) * d)
            w.grad = None
    return out


class DOEHooks(LoopHooks):
    """DOE's step (see :mod:`oodbench.losses.doe`); the averaged P is the method's state."""

    average_: list[torch.Tensor] | None = None


    def _clipped_step(self, batch: Batch, loss: torch.Tensor,
                      restore: list[torch.Tensor] | None = None) -> None:
        """One optimiser step on ``loss`` with the gradient norm clipped; ``restore``: the
        unperturbed weights, put back between the backward pass and the step."""

        def put_back() -> None:
            with torch.no_grad():
                for w, theta in zip(perturbed_parameters(batch.runner, batch.params),
                                    restore or []):
                    w.copy_(theta)

        optimise(loss * batch.share, batch.optimizer, batch.params, scaler=batch.scaler,
                 clip_norm=self.criterion.clip_norm,  # type: ignore[arg-type]
                 before_step=None if restore is None else put_back)

    def step(self, batch: Batch) -> torch.Tensor:
        c: Any = self.criterion
        assert batch.x_out is not None
        x, n = torch.cat([batch.x, batch.x_out]), len(batch.x)
        if batch.epoch < c.warmup:
            with batch.autocast():
                logits = batch.runner(x).float()
            loss = F.cross_entropy(logits[:n], batch.y) + uniform_cross_entropy(logits[n:]).mean()
            self._clipped_step(batch, loss)
            return loss.detach()
        weights = perturbed_parameters(batch.runner, batch.params)
        rng = np.random.default_rng([batch.seed, batch.epoch, batch.index, 0xD0E])
        gamma = c.gammas[int(rng.integers(len(c.gammas)))]
        with batch.autocast():
            new = perturbation(batch.runner, x, n, weights, batch.share)
        self.average_ = new if self.average_ is None else [
            c.average * a.to(b.device) + (1.0 - c.average) * b for a, b in zip(self.average_, new)]
        theta = [w.detach().clone() for w in weights]
        with torch.no_grad():
            for w, p in zip(weights, self.average_):
                w.add_(gamma * p)
        with batch.autocast():
            oe = uniform_cross_entropy(batch.runner(x).float()[n:]).mean()
        self._clipped_step(batch, oe, restore=theta)
        with batch.autocast():
            ce = F.cross_entropy(batch.runner(x).float()[:n], batch.y)
        self._clipped_step(batch, ce)
        return ce.detach()

    def state(self) -> dict[str, torch.Tensor] | None:
        if self.average_ is None:
            return {}
        return {f"average.{i}": p for i, p in enumerate(self.average_)}

    def load(self, net: torch.nn.Module, weights: dict[str, torch.Tensor], out: Path) -> None:
        super().load(net, weights, out)
        state = read_method_state(out)
        self.average_ = [state[f"average.{i}"] for i in range(len(state))] or None


register(TrainingMethod("doe", "DOE (loss doe): a perturbation of the weights in each optimisation "
                        "step, with outliers", DOEHooks, frozenset({"outliers"})))
