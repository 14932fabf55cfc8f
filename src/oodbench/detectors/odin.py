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
pixel units (sigma = 1). The value used is in ``input_std_`` after ``fit``. ``sign_at_zero``
is the step where a gradient entry is exactly 0: ``1`` is the ODIN code's ``(grad >= 0) * 2 - 1``
(also OpenOOD's and the C-OOD code's), ``0`` is ``torch.sign`` (pytorch-ood).

Defaults: T = 1000, eps = 0.0014, the ODIN paper's setting (and OpenOOD's configured values).
Presets (``oodbench.detectors.create("odin", preset=...)``): ``"cood"``: T = 2, eps = 1e-5, the
C-OOD paper's ODIN (Galil et al., ICLR 2023) as it describes it; ``"cood_code"``: the variant
the official C-OOD code computes, whose numbers are the published ones: ``gradient =
"probabilities"`` (the loss is the cross-entropy of the *softmax probabilities* against the
predicted class, ``F.cross_entropy(softmax(z), y)``, so a second softmax is applied to values in
[0, 1] and T does not enter the gradient, which flattens it and can flip its sign), and
``input_std`` = the ImageNet std (0.229, 0.224, 0.225) whatever the model's normalisation.

Relation to pytorch-ood 0.4.0 ``ODIN``: the same perturbation (``norm_std`` = sigma) and score
with ``sign_at_zero=0``; it returns ``-kappa``. Scoring re-reads every image (two forward passes
and one backward pass per image), through ``oodbench.extract.iterate_batches``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch
import torch.nn.functional as F

from oodbench.constraints import BatchSize, NonNegative, Options, Positive, Text, Validated
from oodbench.detectors._live import score_live
from oodbench.detectors.base import Detector, register
from oodbench.extract.activations import Activations

#: what the input gradient differentiates: the cross-entropy of the logits / T (the ODIN paper)
#: or of the softmax probabilities at T = 1 (the C-OOD code)
GRADIENTS = ("logits", "probabilities")
#: the per-channel input std the step is divided by (None: the model transform's)
InputStd = Annotated[tuple[float, ...] | None,
                     Validated("per-channel standard deviations (None: the model transform's)")]


def normalisation_std(transform: Any) -> tuple[float, ...] | None:
    """The ``std`` of the first ``Normalize``-like step of a (torchvision) transform, if any."""
    steps = getattr(transform, "transforms", [transform])
    for step in steps:
        if type(step).__name__ == "Normalize" and hasattr(step, "std"):
            return tuple(float(s) for s in torch.as_tensor(step.std).reshape(-1))
    return None


def odin_perturb(
    model: torch.nn.Module,
    x: torch.Tensor,
    temperature: float,
    epsilon: float,
    std: torch.Tensor,
    *,
    gradient: str = "logits",
    sign_at_zero: int = 1,
) -> torch.Tensor:
    """``x - eps * sign(grad_x L) / std`` with ``L = CE(z(x) / T, argmax z(x))`` (``gradient=
    "logits"``) or ``CE(softmax(z(x)), argmax z(x))`` (``"probabilities"``), per sample."""
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        logits = model(x)
        target = logits.argmax(dim=1)
        inputs = logits / temperature if gradient == "logits" else torch.softmax(logits, dim=1)
        loss = F.cross_entropy(inputs, target, reduction="sum")
        (grad,) = torch.autograd.grad(loss, x)
    step = grad.sign()
    if sign_at_zero:
        step = torch.where(grad == 0, 1.0, step)
    return x.detach() - epsilon * step / std.view(1, -1, *([1] * (x.ndim - 2)))


@register
@dataclass
class ODIN(Detector):
    """Max softmax at temperature T of the input perturbed by one signed-gradient step."""

    temperature: Positive = 1000.0
    epsilon: NonNegative = 0.0014
    gradient: Annotated[str, Options(
        *GRADIENTS,
        note="cross-entropy of the logits / T, or of the softmax probabilities as in the C-OOD "
             "code")] = "logits"
    input_std: InputStd = None
    sign_at_zero: Annotated[int, Options(
        1, 0, note="1: the ODIN code's grad >= 0 -> +1; 0: torch.sign")] = 1
    batch_size: BatchSize = 64
    device: Annotated[str, Text("'auto' or a torch device")] = "auto"

    name = "odin"
    requires = frozenset({"model"})
    paper = "Liang, Li & Srikant, ICLR 2018, arXiv 1706.02690"
    score_only_hyperparams = frozenset(
        {"temperature", "epsilon", "gradient", "sign_at_zero", "batch_size", "device"}
    )

    def __post_init__(self) -> None:
        """Validate (the base), then hold ``input_std`` as a tuple of floats (derived state)."""
        super().__post_init__()
        if self.input_std is not None:
            self.input_std = tuple(float(s) for s in self.input_std)

    def _fit(self, train: Activations | None, model: Any) -> None:
        self.model_ = model
        std = self.input_std or normalisation_std(getattr(model, "transform", None))
        self.input_std_ = tuple(std) if std is not None else (1.0,)

    def _score(self, acts: Activations) -> np.ndarray:
        model, t, eps = self.model_, float(self.temperature), float(self.epsilon)
        was_training = model.training
        model.eval()

        def batch_score(x: torch.Tensor) -> torch.Tensor:
            std = torch.tensor(self.input_std_, dtype=x.dtype, device=x.device)
            x_hat = odin_perturb(model, x, t, eps, std, gradient=self.gradient,
                                 sign_at_zero=self.sign_at_zero)
            with torch.no_grad():
                return torch.softmax(model(x_hat).double() / t, dim=1).max(dim=1).values

        try:
            return score_live(
                self.name, model, acts, batch_score, batch_size=self.batch_size, device=self.device
            )
        finally:
            model.train(was_training)
