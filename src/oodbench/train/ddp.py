"""Data parallelism under ``torchrun``: joining the process group, sharding global batches,
gathering tensors with their gradients, averaging gradients.

A global batch is split into contiguous shares (``numpy.array_split``), rank r taking share r,
so gathering the shares in rank order gives the global batch in its order. Losses that need
the whole batch (contrastive logits, class queues) are computed on every rank from
:func:`gather_with_grad`; its backward sums the gradient that every rank's copy of the loss
sends to a share, so each rank's local gradient is ``world`` times its share of the true one,
and :func:`average_gradients` (or DDP's averaging) returns exactly the single-process gradient.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn


def world() -> tuple[int, int, int]:
    """(world size, rank, local rank), joining the torchrun process group when launched by it."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return 1, 0, 0
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        atexit.register(leave_process_group)
    return dist.get_world_size(), dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))


def leave_process_group() -> None:
    """Destroy the process group while the interpreter is still whole (registered at exit by
    :func:`world`). Left to interpreter finalisation, gloo's worker threads can still hold work
    with tensors whose release needs the GIL, and the process dies of SIGABRT ("terminate called
    without an active exception") after the run has finished; see pytorch/pytorch#179291."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def share(rows: np.ndarray, size: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s contiguous share of a global batch."""
    return np.array_split(rows, size)[rank]


def batches(order: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """``order`` cut into global batches of ``batch_size`` (the last one may be shorter)."""
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along dim 0 in rank order, differentiable (the
    shares may differ in length); ``tensor`` itself in a single process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    sizes = torch.zeros(dist.get_world_size(), dtype=torch.int64, device=tensor.device)
    sizes[dist.get_rank()] = len(tensor)
    dist.all_reduce(sizes)
    longest = int(sizes.max())
    padded = torch.cat([tensor, tensor.new_zeros(longest - len(tensor), *tensor.shape[1:])])
    parts = dist_nn.all_gather(padded)
    return torch.cat([part[: int(n)] for part, n in zip(parts, sizes)])


def average_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Average the ``.grad`` of ``params`` over the ranks (one flat all-reduce); a no-op in a
    single process. Parameters without a gradient count as zero."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    params = list(params)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for p, g in zip(params, grads):
        p.grad = flat[offset : offset + g.numel()].view_as(g).clone()
        offset += g.numel()


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether ``flag`` holds on at least one rank (``flag`` in a single process)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value)
    return bool(value.item() > 0)
