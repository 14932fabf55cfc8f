"""Which parameters train: ``"head"``, ``"last_block"`` or ``"all"``, for any Classifier.

``network(model)`` is the wrapped network whose state dict ``models.load(spec, weights=...)``
reads back (the timm / torchvision / ``wrap()``-ed module, or the classifier itself when it
has no single wrapped child). ``head_module`` finds the linear head by its weight.

``last_block``: the head, the last parameterised block before it and every parameterised
module after that block. The block is found by walking down from the network: at each level
take the last child that holds parameters and is neither the head nor a normalisation layer;
descend while it is a container (``Sequential`` / ``ModuleList``). ResNet: ``layer4[-1]``; ViT:
``blocks[-1]`` (+ the final norm); the demo's SmallCNN: its last convolution.
"""

from __future__ import annotations

from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models.classifier import Classifier

TRAINABLE = ("head", "last_block", "all")
_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)
_CONTAINERS = (nn.Sequential, nn.ModuleList)


def network(model: Classifier) -> nn.Module:
    """The module whose state dict is the checkpoint (see the module docstring)."""
    children = list(model.children())
    own = sum(p.numel() for p in model.parameters())
    if len(children) == 1 and sum(p.numel() for p in children[0].parameters()) == own:
        return children[0]
    return model


def head_module(model: Classifier) -> nn.Module:
    """The ``nn.Linear`` whose weight is ``model.head_weight``."""
    target = model.head_weight.data_ptr()
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.weight.data_ptr() == target:
            return module
    raise InvalidInputError(f"{model.spec}: no nn.Linear module holds the head's weight")


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _last_block(node: nn.Module, head: nn.Module) -> list[nn.Module]:
    """The last block under ``node`` and the parameterised modules after it (see module doc)."""
    kids = [k for k in node.children() if _has_params(k) and k is not head]
    holder = [k for k in kids if any(m is head for m in k.modules())]
    if holder:  # the head sits deeper: the block is inside the module that holds it
        return _last_block(holder[0], head)
    blocks = [i for i, k in enumerate(kids) if not isinstance(k, _NORMS)]
    if not blocks:
        return kids
    last = blocks[-1]
    after = kids[last + 1 :]
    inner = kids[last]
    if isinstance(inner, _CONTAINERS) and len([k for k in inner.children() if _has_params(k)]) > 1:
        return _last_block(inner, head) + after
    return [inner, *after]


def trainable_modules(model: Classifier, which: str) -> list[nn.Module]:
    """The modules whose parameters train for ``which`` in ``TRAINABLE``."""
    if which not in TRAINABLE:
        raise InvalidInputError(f"trainable must be one of {TRAINABLE}; got {which!r}")
    head = head_module(model)
    if which == "head":
        return [head]
    if which == "all":
        return [model]
    return [*_last_block(model, head), head]
