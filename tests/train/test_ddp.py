"""oodbench.train.ddp in 2 gloo processes: a loss of the whole (gathered) batch gives, after
gradient averaging, exactly one process's gradient, and only because the gather keeps its
gradients (a plain all_gather does not)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from oodbench.train import ddp

ROWS = (3, 2)  # uneven shares


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(sum(ROWS), 4, generator=g, dtype=torch.float64), \
        torch.randn(4, 5, generator=g, dtype=torch.float64)


def _loss(embeddings: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(embeddings @ embeddings.T, dim=1).mean()  # couples every pair


def _worker(rank: int, init: str, out: str, keep_gradients: bool) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    x, w = _data()
    w.requires_grad_(True)
    local = x[:ROWS[0]] if rank == 0 else x[ROWS[0]:]
    e = local @ w
    if keep_gradients:
        gathered = ddp.gather_with_grad(e)
    else:
        padded = [torch.zeros(max(ROWS), 5, dtype=e.dtype) for _ in ROWS]
        dist.all_gather(padded, torch.cat([e.detach(), e.new_zeros(max(ROWS) - len(e), 5)]))
        parts = [p[:n] for p, n in zip(padded, ROWS)]
        parts[rank] = e  # only the own share carries a gradient
        gathered = torch.cat(parts)
    _loss(gathered).backward()
    ddp.average_gradients([w])
    if rank == 0:
        torch.save(w.grad, out)
    dist.destroy_process_group()


@pytest.mark.heavy
def test_gathered_loss_gradient_equals_one_process(tmp_path):
    x, w = _data()
    w.requires_grad_(True)
    _loss(x @ w).backward()
    expected = w.grad.clone()
    grads = {}
    for keep in (True, False):
        out = tmp_path / f"grad-{keep}.pt"
        mp.spawn(_worker, args=(f"file://{tmp_path / f'store-{keep}'}", str(out), keep), nprocs=2)
        grads[keep] = torch.load(out)
    np.testing.assert_allclose(grads[True], expected, rtol=1e-12, atol=1e-14)
    assert not np.allclose(grads[False], expected, rtol=1e-3)  # the gradient of the gather matters


def test_single_process_is_the_identity():
    t = torch.randn(3, 2, requires_grad=True)
    assert ddp.gather_with_grad(t) is t
    assert ddp.any_rank(True, torch.device("cpu")) and not ddp.any_rank(False, torch.device("cpu"))


def test_joining_the_group_registers_leaving_it_at_exit(monkeypatch):
    """world() joins the group and registers its destruction at exit: left to interpreter
    finalisation, gloo can abort a finished run (SIGABRT, pytorch/pytorch#179291)."""
    registered = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(ddp.atexit, "register", registered.append)
    # a one-process gloo group stands in for torchrun's (the same calls, no second process)
    init = dist.init_process_group
    monkeypatch.setattr(dist, "init_process_group", lambda backend: init(
        backend, store=dist.HashStore(), rank=0, world_size=1))
    try:
        assert ddp.world()[:2] == (1, 0) and dist.is_initialized()
        assert registered == [ddp.leave_process_group]
        registered[0]()
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
