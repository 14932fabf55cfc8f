"""What every adapter of an existing network shares: the head as a submodule, its weight and
bias, the memoised weights digest, and device resolution."""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from oodbench.errors import InvalidInputError
from oodbench.models.classifier import Classifier


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA if available, else Apple MPS if available, else CPU."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def state_dict_digest(module: nn.Module) -> str:
    """sha256 over the names, dtypes, shapes and bytes of every parameter and buffer."""
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class ModuleHeadClassifier(Classifier):
    """A classifier whose head is a submodule of the wrapped network (usually ``nn.Linear``).

    Subclasses implement ``forward_feature_map``, ``pool`` and ``head_module``. The weights
    digest is computed once and forgotten whenever the weights may change (``load_state_dict``,
    ``.to(dtype)``, ``.half()``).
    """

    def __init__(
        self,
        *,
        spec: str,
        transform: Callable[..., torch.Tensor],
        num_classes: int,
        class_names: Sequence[str] | None,
    ):
        super().__init__()
        self.spec = spec
        self.transform = transform
        self.num_classes = int(num_classes)
        if class_names is not None and len(class_names) != self.num_classes:
            raise InvalidInputError(
                f"{spec}: {len(class_names)} class names for {self.num_classes} outputs"
            )
        self.class_names = list(class_names) if class_names is not None else None
        self._digest: str | None = None

    @abstractmethod
    def head_module(self) -> nn.Module:
        """The final layer, features -> logits."""

    def head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head_module()(features)

    def _linear_head(self) -> nn.Linear:
        head = self.head_module()
        if not isinstance(head, nn.Linear):
            raise InvalidInputError(
                f"{self.spec}: the head is a {type(head).__name__}, not nn.Linear, so it has no "
                "weight matrix; detectors that need head weights cannot run on this model"
            )
        return head

    @property
    def head_weight(self) -> torch.Tensor:
        return self._linear_head().weight.detach()

    @property
    def head_bias(self) -> torch.Tensor:
        head = self._linear_head()
        if head.bias is None:
            return torch.zeros(
                head.out_features, dtype=head.weight.dtype, device=head.weight.device
            )
        return head.bias.detach()

    def weights_digest(self) -> str:
        if self._digest is None:
            self._digest = state_dict_digest(self)
        return self._digest

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ):  # type: ignore[override]
        self._digest = None
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _apply(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._digest = None
        return super()._apply(fn, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"spec={self.spec!r}, num_classes={self.num_classes}"
