"""Helpers for differential tests against pytorch-ood 0.4.0 (higher = more OOD there).

``pod`` imports ``pytorch_ood.detector`` or skips the test with the reason when it is missing
(it is a dev dependency, so in CI it is present). Tolerances are relative: ``assert_rel``
checks ``|ours - ref| <= rtol * |ref|`` element-wise, with an optional absolute floor given as
a fraction of ``max |ref|`` for scores that cross zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import numpy as np
import pytest
import torch

from oodbench.extract.activations import Activations


def pod() -> ModuleType:
    """``pytorch_ood.detector`` (skips when pytorch-ood is not installed)."""
    return pytest.importorskip("pytorch_ood.detector")


def tensor(a: np.ndarray | None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    assert a is not None
    return torch.as_tensor(np.asarray(a)).to(dtype)


def linear(acts: Activations, dtype: torch.dtype = torch.float32) -> torch.nn.Linear:
    """``torch.nn.Linear`` holding the activations' head (what pytorch-ood calls ``head``)."""
    weight, bias = tensor(acts.head_weight, dtype), tensor(acts.head_bias, dtype)
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


@contextmanager
def float64_default() -> Iterator[None]:
    """Run pytorch-ood code that allocates with the default dtype in float64."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextmanager
def float32_casts_as_float64() -> Iterator[None]:
    """Run pytorch-ood code that hard-codes ``tensor.float()`` (ViM) in float64, unchanged.

    Its float32 eigenvectors differ from the float64 ones by ~1e-4 of the score scale, which
    hides real differences; within this context ``Tensor.float()`` returns a float64 tensor.
    """
    original = torch.Tensor.float
    torch.Tensor.float = lambda self, *args, **kwargs: self.to(torch.float64)  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.float = original  # type: ignore[method-assign]


def assert_rel(ours: np.ndarray, ref: np.ndarray | torch.Tensor, rtol: float = 1e-5,
               floor: float = 0.0) -> None:
    """``ours`` equals ``ref`` to ``rtol`` relative (plus ``floor * max|ref|`` absolute)."""
    ref = ref.detach().cpu().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    ref = ref.astype(np.float64).reshape(-1)
    assert ours.shape == ref.shape
    atol = floor * float(np.abs(ref).max())
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol)
