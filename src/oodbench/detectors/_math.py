"""Maths shared by several detectors (one place, no copies between detector files)."""

from __future__ import annotations

import numpy as np
import torch


def as_tensor(a: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A CPU tensor of ``a`` in ``dtype`` (float64 by default for exact scoring).

    Read-only arrays (memory-mapped activations from the cache) are copied, since torch cannot
    wrap non-writable memory; writable arrays of the right dtype are shared without a copy.
    """
    arr = np.asarray(a)
    if not arr.flags.writeable:
        arr = np.array(arr)
    return torch.from_numpy(arr).to(dtype)


def softmax(logits: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    """softmax(logits / T) along the class axis, in float64."""
    return torch.softmax(as_tensor(logits) / temperature, dim=1)


def log_softmax(logits: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) along the class axis, in float64."""
    return torch.log_softmax(as_tensor(logits) / temperature, dim=1)


def cosine_similarities(features: np.ndarray, weight: np.ndarray) -> torch.Tensor:
    """cos(f_i, w_c) for every sample i and head row c, in float64: (N, C)."""
    f = torch.nn.functional.normalize(as_tensor(features), dim=1)
    w = torch.nn.functional.normalize(as_tensor(weight), dim=1)
    return f @ w.T


def neg_energy(logits: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    """Negative energy ``T * logsumexp(z / T)`` along the class axis, in float64: (N,).

    Liu et al., "Energy-based Out-of-distribution Detection", NeurIPS 2020 (arXiv 2010.03759):
    ``E(x; T) = -T log sum_c exp(z_c / T)``; this returns ``-E`` (higher = more in-distribution).
    """
    return temperature * torch.logsumexp(as_tensor(logits) / temperature, dim=1)


def l2_normalize(x: np.ndarray | torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Rows scaled to unit L2 norm (zero rows stay zero), in ``dtype``."""
    t = x.to(dtype) if isinstance(x, torch.Tensor) else as_tensor(x, dtype)
    return torch.nn.functional.normalize(t, dim=1)
