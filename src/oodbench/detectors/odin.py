"""ODIN: temperature scaling plus a small input perturbation, on the live network.

Liang, Li & Srikant, "Enhancing The Reliability of Out-of-distribution Image Detection in
Neural Networks", ICLR 2018 (arXiv 1706.02690).

With z(x) the logits, T the temperature and y = argmax_c z_c(x):

    L(x)  = -log softmax(z(x) / T)_y                 (cross-entropy of the logits / T)
    x'    = x - eps * sign(grad_x L(x)) / sigma      (one signed-gradient step towards y)
    kappa = max_c softmax(z(x') / T)_c

``sigma`` is the per-channel standard deviation of the model's input normalisation, so that
``eps`` is a step in [0, 1] pixel units as in the ODIN code (which divides the signed gradient
by its normalisation std, 63/255, 62.1/255, 66.7/255). ``input_std=None`` reads it from a
``Normalize`` in the model's ``transform``; without one the input tensor is taken to be in
pixel units (sigma = 1). The value used is in ``input_std_`` after ``fit``. ``sign(0) = 0``
(torch; the ODIN code maps 0 to +1, which only matters for exactly-zero gradients).

Presets: ``preset="cood"`` (default): T = 2, eps = 1e-5, the C-OOD paper's ODIN (Galil et al.,
ICLR 2023); ``preset="odin"``: T = 1000, eps = 0.0014, the ODIN paper's ImageNet-scale
setting. An explicit ``temperature`` / ``epsilon`` overrides the preset's value.

The C-OOD code's ODIN differs in three ways, and we follow the ODIN paper, not it: (1) it
takes the cross-entropy of the *softmax probabilities* (``F.cross_entropy(probs, pred)``, so
a second softmax is applied to probabilities in [0, 1]) instead of the logits, which flattens
and can even flip the gradient; (2) it perturbs with T = 1 (no temperature in the loss); (3) it
always divides by the ImageNet std (0.229, 0.224, 0.225), whatever the model's normalisation.
Its published numbers therefore belong to that variant, not to this one.

Relation to pytorch-ood 0.4.0 ``ODIN``: the same perturbation (``norm_std`` = sigma) and score;
it returns ``-kappa``. Scoring re-reads every image (two forward passes and one backward pass
per image), through ``oodbench.extract.iterate_batches``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from oodbench.detectors._live import score_live
from oodbench.detectors.base import Detector, register
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations

#: preset name -> (temperature, epsilon)
PRESETS = {"cood": (2.0, 1e-5), "odin": (1000.0, 0.0014)}


def normalisation_std(transform: Any) -> tuple[float, ...] | None:
    """The ``std`` of the first ``Normalize``-like step of a (torchvision) transform, if any."""
    steps = getattr(transform, "transforms", [transform])
    for step in steps:
        if type(step).__name__ == "Normalize" and hasattr(step, "std"):
            return tuple(float(s) for s in torch.as_tensor(step.std).reshape(-1))
    return None


def odin_perturb(
    model: torch.nn.Module, x: torch.Tensor, temperature: float, epsilon: float, std: torch.Tensor
) -> torch.Tensor:
    """``x - eps * sign(grad_x CE(z(x) / T, argmax z(x))) / std`` (per-sample gradients)."""
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        logits = model(x) / temperature
        loss = F.cross_entropy(logits, logits.argmax(dim=1), reduction="sum")
        (grad,) = torch.autograd.grad(loss, x)
    return x.detach() - epsilon * grad.sign() / std.view(1, -1, *([1] * (x.ndim - 2)))


@register
@dataclass
class ODIN(Detector):
    """Max softmax at temperature T of the input perturbed by one signed-gradient step."""

    preset: str | None = "cood"
    temperature: float | None = None
    epsilon: float | None = None
    input_std: tuple[float, ...] | None = None
    batch_size: int = 64
    device: str = "auto"

    name = "odin"
    requires = frozenset({"model"})
    paper = "Liang, Li & Srikant, ICLR 2018, arXiv 1706.02690"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.preset is not None:
            if self.preset not in PRESETS:
                raise InvalidInputError(
                    f"unknown ODIN preset {self.preset!r}; use one of {sorted(PRESETS)} or "
                    "preset=None with explicit temperature and epsilon"
                )
            t, eps = PRESETS[self.preset]
            self.temperature = t if self.temperature is None else self.temperature
            self.epsilon = eps if self.epsilon is None else self.epsilon
        if self.temperature is None or self.epsilon is None:
            raise InvalidInputError("ODIN with preset=None needs both temperature and epsilon")
        if not self.temperature > 0 or self.epsilon < 0:
            raise InvalidInputError(
                f"ODIN needs temperature > 0 and epsilon >= 0; got {self.temperature}, {self.epsilon}"
            )

    def _fit(self, train: Activations | None, model: Any) -> None:
        self.model_ = model
        std = self.input_std or normalisation_std(getattr(model, "transform", None))
        self.input_std_ = tuple(std) if std is not None else (1.0,)

    def _score(self, acts: Activations) -> np.ndarray:
        model, t, eps = self.model_, float(self.temperature), float(self.epsilon)  # type: ignore[arg-type]
        was_training = model.training
        model.eval()

        def batch_score(x: torch.Tensor) -> torch.Tensor:
            std = torch.tensor(self.input_std_, dtype=x.dtype, device=x.device)
            x_hat = odin_perturb(model, x, t, eps, std)
            with torch.no_grad():
                return torch.softmax(model(x_hat).double() / t, dim=1).max(dim=1).values

        try:
            return score_live(
                self.name, model, acts, batch_score, batch_size=self.batch_size, device=self.device
            )
        finally:
            model.train(was_training)
