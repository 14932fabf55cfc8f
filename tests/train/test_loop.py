"""The one training loop (oodbench.train.loop): every method resumes through it to the same
bits, its optimisation step clips after unscaling and before the step, skipped batches still
step the schedule, the grad scaler's state survives a resume, and nothing else calls
``.backward()``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from oodbench.train import checkpoint as ckpt
from oodbench.train.loop import Checkpoint, EpochTotals, StepResult, TrainLoop, optimise
from oodbench.train.recipe import train_recipe
from tests.train import _clip_run
from tests.train._digits_run import run
from tests.train._method_run import method_run, noise
from tests.train.test_recipe import TINY, _colour_classes

SRC = Path(__file__).resolve().parents[2] / "src" / "oodbench"
EPOCHS = 3


def _train(method: str, out: Path):  # type: ignore[no-untyped-def]
    """``EPOCHS`` epochs of ``method`` into ``out``: (state dict, per-epoch losses, epochs a
    checkpoint held at the start)."""
    if method == "recipe":
        torch.set_num_threads(1)
        res = train_recipe(TINY, _colour_classes(n_per_class=10), loss="ce", seed=1,
                           device="cpu", out=out)
        return res.model.state_dict(), [h["loss"] for h in res.history], None
    if method in ("cma", "npos"):
        result = _clip_run.run(method, str(out), epochs=EPOCHS)
    elif method in ("umap", "doe"):
        result = method_run(str(out), method, epochs=EPOCHS)
    elif method == "oe":
        result = run(str(out), epochs=EPOCHS, loss="oe", outliers=noise(), outlier_batch_size=16)
    else:
        result = run(str(out), epochs=EPOCHS, loss=method)
    return result.model.state_dict(), [h["loss"] for h in result.history], result.resumed_from


@pytest.mark.parametrize("method", ["ce", "oe", "um", "umap", "doe", "cma", "npos", "recipe"])
def test_every_method_resumes_through_the_loop_bit_identically(method, tmp_path, monkeypatch):
    """Interrupted while the loop writes the last epoch's checkpoint (so epochs 1..EPOCHS-1
    stand), resumed: the same weights, bit for bit, and the same per-epoch losses as a run
    that was never interrupted (both in this process on one thread: the same ops in the same
    order)."""
    straight, straight_losses, _ = _train(method, tmp_path / "straight")
    real_write, calls = ckpt.write_checkpoint, []

    def dies_at_the_last_epoch(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == EPOCHS:
            raise KeyboardInterrupt
        return real_write(*args, **kwargs)

    monkeypatch.setattr(ckpt, "write_checkpoint", dies_at_the_last_epoch)
    with pytest.raises(KeyboardInterrupt):
        _train(method, tmp_path / "cut")
    monkeypatch.setattr(ckpt, "write_checkpoint", real_write)
    assert ckpt.read_checkpoint(tmp_path / "cut")[0]["epochs_done"] == EPOCHS - 1  # type: ignore[index]
    resumed, resumed_losses, resumed_from = _train(method, tmp_path / "cut")
    assert resumed_from in (EPOCHS - 1, None)  # None: the recipe's result does not say
    assert resumed.keys() == straight.keys()
    for key in straight:
        assert torch.equal(resumed[key], straight[key]), key
    assert resumed_losses == straight_losses


def _linear(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def test_optimise_clips_after_unscaling_then_restores_then_steps():
    """With a grad scaler of scale 1024, ``before_step`` sees the unscaled gradient clipped to
    norm 0.5, and plain SGD (lr 1) then moves the weights by exactly that gradient."""
    net = _linear()
    x, y = torch.randn(8, 4) * 50, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    params = list(net.parameters())
    before = [p.detach().clone() for p in params]
    seen: list[list[torch.Tensor]] = []
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    loss = torch.nn.functional.cross_entropy(net(x), y)
    reference = torch.autograd.grad(loss, params, retain_graph=True)
    optimise(loss, opt, params, scaler=scaler, clip_norm=0.5,
             before_step=lambda: seen.append([p.grad.clone() for p in params]))  # type: ignore[union-attr]
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in seen[0]]))
    # clip_grad_norm_ scales by 0.5 / (norm + 1e-6): the clipped norm is 0.5 up to that 1e-6
    # and float32 rounding of the sums (rel 1e-5)
    assert float(norm) == pytest.approx(0.5, rel=1e-5)
    raw = torch.linalg.vector_norm(torch.stack([g.norm() for g in reference]))
    assert raw > 1.0  # the clip did something
    for g, r in zip(seen[0], reference):  # the direction is the true gradient's
        torch.testing.assert_close(g, r * (0.5 / raw), rtol=1e-4, atol=1e-7)
    for p, b, g in zip(params, before, seen[0]):
        torch.testing.assert_close(p.detach(), b - g, rtol=0, atol=1e-6)  # lr 1: p - grad


def test_skipped_batches_step_the_schedule_but_not_the_loss():
    net = _linear()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    loop: TrainLoop[int] = TrainLoop(opt, scheduler, list(net.parameters()), epochs=2)
    x, y = torch.randn(4, 4), torch.tensor([0, 1, 2, 0])
    losses: list[float] = []

    def step(epoch: int, index: int, batch: int) -> StepResult:
        if batch % 2:  # odd batches unreadable
            return StepResult(None, skipped=3)
        value = torch.nn.functional.cross_entropy(net(x), y)
        loop.step(value)
        losses.append(float(value.detach()))
        return StepResult(value.detach(), len(y))

    def record(t: EpochTotals) -> dict[str, float]:
        return {"loss": float(t.loss_sum) / t.seen, "seen": t.seen, "skipped": t.skipped}

    history = loop.run(lambda epoch: range(5), step, record)
    assert scheduler.last_epoch == 10  # every batch, skipped or not
    assert [h["seen"] for h in history] == [12, 12] and [h["skipped"] for h in history] == [6, 6]
    assert history[0]["loss"] == pytest.approx(np.mean(losses[:3]), rel=1e-12)


def test_the_grad_scaler_state_is_checkpointed_and_resumed(tmp_path):
    """A scale that grows every step: the resumed run continues from the saved scale (not the
    initial one), so its final scale and weights equal an uninterrupted run's."""

    def fit(out: Path, epochs: int) -> tuple[float, dict[str, torch.Tensor]]:
        net = _linear()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        loop: TrainLoop[int] = TrainLoop(
            opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), list(net.parameters()),
            epochs, checkpoint=Checkpoint(out, {"n": 1}, net))
        loop.scaler = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=1)
        g = torch.Generator().manual_seed(0)
        data = [(torch.randn(4, 4, generator=g), torch.randint(0, 3, (4,), generator=g))
                for _ in range(3)]

        def step(epoch: int, index: int, batch: int) -> StepResult:
            x, y = data[batch]
            value = torch.nn.functional.cross_entropy(net(x), y)
            loop.step(value)
            return StepResult(value.detach(), 4)

        loop.run(lambda epoch: range(3), step,
                 lambda t: {"epoch": t.epoch + 1, "loss": float(t.loss_sum) / t.seen})
        assert loop.scaler is not None
        return loop.scaler.get_scale(), net.state_dict()

    scale, weights = fit(tmp_path / "straight", 3)
    assert scale == 8.0 * 2**9  # doubled after each of the 9 finite steps
    fit(tmp_path / "cut", 2)
    resumed_scale, resumed = fit(tmp_path / "cut", 3)
    assert resumed_scale == scale
    assert all(torch.equal(resumed[k], weights[k]) for k in weights)


def test_only_the_loop_calls_backward():
    """Every optimisation step and gradient pass of oodbench goes through the one loop."""
    callers = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                     if ".backward(" in p.read_text(encoding="utf-8"))
    assert callers == ["train/loop.py"]
