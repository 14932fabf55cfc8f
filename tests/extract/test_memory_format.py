"""The forward pass's memory format: channels-last only on CUDA with autocast. The CPU stays
contiguous: channels-last gains little or loses there (``speed/bench_memory_format.py``),
and with it the same images extracted locally and as Ray shard tasks gave different values
(``tests/run/test_ray_executor.py`` requires them equal)."""

from __future__ import annotations

import torch
from torch import nn

from oodbench.extract.runtime import uses_channels_last
from tests.extract._toy import TinyNet


def test_channels_last_only_on_cuda_with_autocast():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not uses_channels_last(TinyNet(), cpu, None)  # a convolutional network on the CPU
    assert not uses_channels_last(TinyNet(), cpu, torch.bfloat16)
    assert not uses_channels_last(nn.Sequential(nn.Flatten(), nn.Linear(12, 3)), cpu, None)
    assert uses_channels_last(TinyNet(), cuda, torch.bfloat16)
    assert not uses_channels_last(TinyNet(), cuda, None)
