"""A stand-in for a GPU on a CPU-only machine: find device mistakes of the torch path without CUDA.

``fake_device()`` is a context manager yielding the device ``cpu:0`` for ``compute.use("torch",
device=...)``. A ``TorchFunctionMode`` tracks the tensors that would live on that device (made by
factories or ``.to()`` with ``device=cpu:0``, and everything computed from them) and raises, as
CUDA would, when

- an operation mixes such a tensor with a host tensor of one or more dimensions (0-d host
  tensors are allowed, as CUDA allows them; indexing with host index tensors too);
- such a tensor is turned into NumPy (``.numpy()``, ``np.asarray``) without ``.cpu()`` first.

Their ``.device`` is ``cpu:0``; ``.cpu()`` and ``.to("cpu")`` return host tensors, as on a GPU. Arithmetic still runs on the CPU,
so results are those of the torch path on the CPU.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

FAKE = torch.device("cpu", 0)
_ALLOWED_MIXES = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}
_TO_HOST = {torch.Tensor.cpu}
_DEVICE_GETTER = torch.Tensor.device.__get__  # a method-wrapper: compare with ==


class DeviceMistake(RuntimeError):
    """What CUDA would have raised."""


def _is_fake(device: Any) -> bool:
    return device is not None and torch.device(device) == FAKE


class _FakeDeviceMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self._on_device: dict[int, weakref.ref] = {}

    def on_device(self, t: torch.Tensor) -> bool:
        ref = self._on_device.get(id(t))
        return ref is not None and ref() is t

    def _mark(self, value: Any) -> None:
        for t in tree_flatten(value)[0]:
            if isinstance(t, torch.Tensor) and not self.on_device(t):
                key = id(t)
                self._on_device[key] = weakref.ref(t, lambda _, key=key: self._on_device.pop(key, None))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        device = [t for t in tensors if self.on_device(t)]
        host = [t for t in tensors if not self.on_device(t) and t.dim() > 0]
        name = getattr(func, "__name__", str(func))
        if device and func == _DEVICE_GETTER:
            return FAKE
        if device and func in (torch.Tensor.numpy, torch.Tensor.__array__):
            raise DeviceMistake(f"{name}() of a tensor on the GPU: call .cpu() first")
        if device and host and func not in _ALLOWED_MIXES:
            raise DeviceMistake(
                f"{name}: expected all tensors on the same device, got the GPU and the host "
                f"(host shapes {[tuple(t.shape) for t in host]})"
            )
        result = func(*args, **kwargs)
        target = kwargs.get("device")
        if func is torch.Tensor.to:
            target = target or next((a for a in args[1:] if isinstance(a, (str, torch.device))), None)
        moved = func in _TO_HOST or target is not None
        if moved and any(result is t for t in tensors):  # a real move makes a new tensor
            result = result.detach()
        if _is_fake(target) or (device and not moved):
            self._mark(result)
        return result


@contextmanager
def fake_device() -> Iterator[torch.device]:
    """Inside: ``cpu:0`` behaves like a GPU for device mistakes (see the module docstring)."""
    with _FakeDeviceMode():
        yield FAKE
