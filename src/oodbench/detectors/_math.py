"""Maths shared by several detectors (one place, no copies between detector files)."""

from __future__ import annotations

import numpy as np
import torch


def as_tensor(a: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A CPU tensor view/copy of ``a`` in ``dtype`` (float64 by default for exact scoring)."""
    return torch.as_tensor(np.asarray(a)).to(dtype)


def softmax(logits: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    """softmax(logits / T) along the class axis, in float64."""
    return torch.softmax(as_tensor(logits) / temperature, dim=1)


def log_softmax(logits: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) along the class axis, in float64."""
    return torch.log_softmax(as_tensor(logits) / temperature, dim=1)
