"""Weight masks for Unleashing Mask: a top-k binary mask of learnable scores on every conv and
linear weight, trained by the straight-through estimator (edge-popup).

Zhu et al., "Unleashing Mask: Explore the Intrinsic Out-of-Distribution Detection Capability",
ICML 2023 (arXiv 2306.03715), after Ramanujan et al.'s edge-popup ("What's Hidden in a
Randomly Weighted Neural Network?", CVPR 2020, arXiv 1911.13299). Checked against
tmlr-group/Unleashing-Mask ``utils/conv_type.py`` and ``utils/linear_type.py`` (``SubnetConv``,
``GetSubnet``):

    m = 1 on the ceil(k * n) entries of |s| that are largest, 0 on the others  (per layer)
    W_used = W * m,        d L / d s = sign(s) * (d L / d W_used) * W          (straight-through)

``keep`` is ``k``, the fraction of each layer's weights that is *kept* (the official
``prune_rate`` is that fraction too, despite its name: 0.8 keeps 80 %). The scores start
Kaiming-uniform (a = sqrt(5)), as the official layers, from a generator seeded by the run's
seed and the layer's position, so every DDP rank builds the same masks.

The masks are ``torch.nn.utils.parametrize`` parametrisations of ``weight``; :func:`bake`
replaces them by the masked weights (a plain model of the same architecture).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from oodbench.errors import InvalidInputError
from oodbench.losses.um import check_keep

#: layer types that get a mask (the official code masks every convolution and linear layer)
MASKABLE = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


class _TopK(torch.autograd.Function):
    """1 on the ``ceil(k n)`` largest entries, 0 elsewhere; the gradient passes straight through."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, keep: float) -> torch.Tensor:  # type: ignore[override]
        flat = scores.flatten()
        drop = int((1.0 - keep) * flat.numel())  # as the official GetSubnet: the lowest j go
        mask = torch.ones_like(flat)
        mask[flat.argsort()[:drop]] = 0.0
        return mask.view_as(scores)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad, None


def top_k_mask(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """The binary mask of the ``keep`` share of largest ``|scores|`` (straight-through)."""
    return _TopK.apply(scores.abs(), keep)  # type: ignore[no-any-return]


class WeightMask(nn.Module):
    """The parametrisation ``W -> W * top_k_mask(scores, keep)`` with learnable ``scores``."""

    def __init__(self, shape: torch.Size, keep: float, generator: torch.Generator):
        super().__init__()
        self.keep = keep
        fan_in = math.prod(shape[1:])
        bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform_(a = sqrt(5)) of an (out, in, ...) tensor
        scores = torch.empty(shape).uniform_(-bound, bound, generator=generator)
        self.scores = nn.Parameter(scores)

    def mask(self) -> torch.Tensor:
        return top_k_mask(self.scores, self.keep)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * self.mask().to(weight.dtype)


def maskable_layers(root: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every conv / linear layer under ``root`` (not yet masked)."""
    return [(n, m) for n, m in root.named_modules()
            if isinstance(m, MASKABLE) and not parametrize.is_parametrized(m, "weight")]


def attach(modules: list[nn.Module], keep: float, seed: int, who: str) -> list[WeightMask]:
    """Put a :class:`WeightMask` on the weight of every maskable layer under ``modules`` and
    return the masks (in a fixed order); a one-line error when there is none."""
    keep = check_keep(keep, who)
    layers = [m for root in modules for _, m in maskable_layers(root)]
    layers = list({id(m): m for m in layers}.values())
    if not layers:
        raise InvalidInputError(
            f"{who}: the trainable part of the model has no convolution or linear layer to mask "
            f"(masks go on {', '.join(t.__name__ for t in MASKABLE)} weights); train more of it "
            "(trainable='all') or use a model with such layers"
        )
    masks = []
    for index, layer in enumerate(layers):
        generator = torch.Generator().manual_seed(int(seed) * 100_003 + index)
        weight: torch.Tensor = layer.weight  # type: ignore[assignment]
        mask = WeightMask(weight.shape, keep, generator).to(weight.device)
        parametrize.register_parametrization(layer, "weight", mask)
        masks.append(mask)
    return masks


def bake(root: nn.Module) -> None:
    """Replace every mask under ``root`` by its masked weight ``W * m`` (a plain module again)."""
    for module in list(root.modules()):
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


def plain_state_dict(root: nn.Module) -> dict[str, torch.Tensor]:
    """``root``'s state dict in the unmasked layout, with each masked weight as ``W * m``."""
    state: dict[str, torch.Tensor] = {}
    for key, value in root.state_dict().items():
        if ".parametrizations." not in key:
            state[key] = value
    for name, module in root.named_modules():
        if parametrize.is_parametrized(module, "weight"):
            with torch.no_grad():
                state[f"{name}.weight" if name else "weight"] = module.weight.detach().clone()
    return {k: state[k] for k in sorted(state)}
