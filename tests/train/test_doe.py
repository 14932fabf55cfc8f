"""DOE's step against a direct re-statement of the official doe_final.py / utils_awp.py
computations: the scale gradient, the normalised perturbation, theta restored exactly, one
whole step, several steps of the official loop with its moving average of P, resume after a
crash, and the outlier source required before training."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from oodbench.data.digits import DigitsSource
from oodbench.errors import InvalidInputError
from oodbench.models.small_cnn import SmallCNN
from oodbench.train import train
from oodbench.train.hooks import Batch
from oodbench.train.methods.doe import (
    DOEHooks,
    dropout_off,
    perturbation,
    perturbed_parameters,
    scale_gradient,
)
from tests.train._method_run import method_run


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 5))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, 1, 6, 6, generator=g), torch.randn(10, 1, 6, 6, generator=g), \
        torch.randint(0, 5, (6,), generator=g)


def test_scale_gradient_matches_autograd_of_the_official_surrogate():
    z = torch.randn(12, 7, generator=torch.Generator().manual_seed(0))
    scale = torch.ones(1, requires_grad=True)
    x = z * scale
    l_sur = (x.mean(1) - torch.logsumexp(x, dim=1)).mean()
    (official,) = torch.autograd.grad(l_sur, [scale])
    torch.testing.assert_close(scale_gradient(z), official[0])  # float32: the dtype's defaults


def test_perturbation_matches_the_official_proxy_step():
    net, (x_in, x_out, _) = _net().train(), _data()
    x = torch.cat([x_in, x_out])
    proxy = copy.deepcopy(net)  # doe_final.train: proxy, SGD lr 1 on reg_sur, diff_in_weights
    scale = torch.ones(1, requires_grad=True)
    out = proxy(x) * scale
    l_sur = (out[6:].mean(1) - torch.logsumexp(out[6:], dim=1)).mean()
    reg = torch.sum(torch.autograd.grad(l_sur, [scale], create_graph=True)[0] ** 2)
    opt = torch.optim.SGD(proxy.parameters(), lr=1)
    opt.zero_grad()
    reg.backward()
    opt.step()
    expected = {}
    for (k, old), (_, new) in zip(net.state_dict().items(), proxy.state_dict().items()):
        if old.ndim > 1 and "weight" in k:
            diff = new - old
            expected[k] = old.norm() / (diff.norm() + 1e-20) * diff
    buffers = {k: v.clone() for k, v in net.state_dict().items() if "running" in k}
    weights = [p for p in net.parameters() if p.ndim >= 2]
    ours = perturbation(net, x, 6, weights)
    names = [k for k, p in net.named_parameters() if p.ndim >= 2]
    assert names == list(expected)
    for name, p in zip(names, ours):
        # float32 autograd through a second-order graph against the first-order proxy step:
        # ~1e-6 relative
        torch.testing.assert_close(p, expected[name], rtol=1e-4, atol=1e-6)
    for k, v in buffers.items():  # BatchNorm statistics untouched (the official proxy is a copy)
        assert torch.equal(net.state_dict()[k], v), k


def _batch(net, opt, epoch=1, seed=0):
    x_in, x_out, y = _data()
    return Batch(net, opt, list(net.parameters()), x_in, y, x_out, epoch, 0, seed, 1.0,
                 lambda: torch.autocast("cpu", enabled=False))


def test_step_restores_theta_exactly_and_matches_the_official_step():
    from oodbench.losses import create

    net = _net().train()
    theta = {k: v.clone() for k, v in net.named_parameters()}
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    seen = []
    step = opt.step

    def record_step(*args, **kwargs):
        seen.append({k: v.detach().clone() for k, v in net.named_parameters()})
        return step(*args, **kwargs)

    opt.step = record_step  # type: ignore[method-assign]
    hooks = DOEHooks(create("doe", warmup=1))
    hooks.step(_batch(net, opt))
    assert len(seen) == 2
    assert all(torch.equal(seen[0][k], theta[k]) for k in theta)  # theta back before the update
    # the official step, re-stated: OE gradient at theta + gamma P (clipped), applied to theta,
    # then the CE step; gamma is the one the run's generator drew
    ref = _net().train()
    ref.load_state_dict({**ref.state_dict(), **theta})
    x_in, x_out, y = _data()
    x = torch.cat([x_in, x_out])
    p = perturbation(ref, x, 6, [w for w in ref.parameters() if w.ndim >= 2])
    gamma = hooks.criterion.gammas[int(np.random.default_rng([0, 1, 0, 0xD0E]).integers(4))]
    with torch.no_grad():
        for w, d in zip([w for w in ref.parameters() if w.ndim >= 2], p):
            w.add_(gamma * d)
    ref.zero_grad()
    out = ref(x)
    (-(out[6:].mean(1) - torch.logsumexp(out[6:], dim=1)).mean()).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1)
    with torch.no_grad():
        for (k, w) in ref.named_parameters():
            w.copy_(theta[k] - 0.1 * w.grad)
    ref.zero_grad()
    F.cross_entropy(ref(x)[:6], y).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1)
    with torch.no_grad():
        for w in ref.parameters():
            w.sub_(0.1 * w.grad)
    for (k, ours), (_, theirs) in zip(net.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7, msg=k)  # float32 steps: ~1e-7


#: the official loop's constants (QizhouWang/DOE @ 065bd3a): the moving average of the
#: perturbation, ``diff = average_diff(diff, diff_in_weights(net, proxy), beta=.6)``
#: (doe_final.py:176; utils/utils_awp.py:29-32: ``beta * cur + (1 - beta) * new``), the first
#: DOE step taking the new direction alone (doe_final.py:172-173), EPS (utils/utils_awp.py:5)
OFFICIAL_BETA, OFFICIAL_EPS = 0.6, 1e-20


def _official_oe(logits: torch.Tensor) -> torch.Tensor:
    """doe_final.py:182, ``l_oe``: minus the mean over outliers of mean_c z_c - logsumexp z."""
    return -(logits.mean(1) - torch.logsumexp(logits, dim=1)).mean()


def _official_iteration(net, proxy, opt, x, y, n, epoch, warmup, diff, gamma):
    """One iteration of doe_final.py ``train`` (lines 151-205), re-stated: the proxy copy takes
    one SGD step of lr 1 down (d l_sur / d scale)^2, the normalised weight differences are
    averaged into ``diff`` (the first DOE step takes them alone), the OE step is taken at
    theta + gamma diff and gamma diff subtracted again, then the CE step. Returns ``diff``."""
    if epoch >= warmup:
        proxy.load_state_dict(net.state_dict())
        new = _official_direction(net, proxy, x, n)
        diff = new if diff is None else {
            key: OFFICIAL_BETA * diff[key] + (1 - OFFICIAL_BETA) * new[key] for key in diff}
        with torch.no_grad():
            for key, w in net.named_parameters():
                if key in diff:
                    w.add_(gamma * diff[key])
    out = net(x)
    loss = _official_oe(out[n:])
    if epoch < warmup:
        loss = F.cross_entropy(out[:n], y) + loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1)
    opt.step()
    if epoch >= warmup:
        with torch.no_grad():
            for key, w in net.named_parameters():
                if key in diff:
                    w.add_(-gamma * diff[key])
        opt.zero_grad()
        F.cross_entropy(net(x)[:n], y).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1)
        opt.step()
    return diff


def test_several_steps_match_the_official_loop_with_its_moving_average():
    """Three epochs of three batches (warm-up 1): after every step the weights, the BatchNorm
    statistics and the averaged perturbation P equal those of the re-stated official loop.

    Nesterov SGD with momentum as the official optimiser, without weight decay: the official
    loop applies the decay at theta + gamma P, oodbench at theta (the documented difference of
    lr * wd * gamma * P per step); without it both are the same computation. Tolerance 1e-6:
    float32 rounding (relative 6e-8 on weights and P entries below 1) accumulated over nine
    steps; the two differ only in rounding (theta + gamma P - gamma P against theta copied back,
    the normalisation of P along another autograd path); measured differences are <= 3.1e-7."""
    from oodbench.losses import create

    warmup, epochs, per_epoch, n = 1, 3, 3, 6
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(n, 1, 6, 6, generator=g), torch.randn(10, 1, 6, 6, generator=g),
                torch.randint(0, 5, (n,), generator=g)) for _ in range(epochs * per_epoch)]
    ours, ref = _net().train(), _net().train()
    proxy = copy.deepcopy(ref)

    def sgd(net):
        return torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)

    our_opt, ref_opt = sgd(ours), sgd(ref)
    hooks = DOEHooks(create("doe", warmup=warmup))
    diff, averaged = None, 0
    for epoch in range(epochs):
        for index in range(per_epoch):
            x_in, x_out, y = batches[epoch * per_epoch + index]
            hooks.step(Batch(ours, our_opt, list(ours.parameters()), x_in, y, x_out, epoch, index,
                             0, 1.0, lambda: torch.autocast("cpu", enabled=False)))
            # gamma: the draw of oodbench's seeded generator (the official torch.randperm)
            draw = np.random.default_rng([0, epoch, index, 0xD0E]).integers(4)
            gamma = hooks.criterion.gammas[int(draw)]
            diff = _official_iteration(ref, proxy, ref_opt, torch.cat([x_in, x_out]), y, n,
                                       epoch, warmup, diff, gamma)
            where = f"epoch {epoch}, step {index}"
            for (key, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=f"{key} ({where})")
            if epoch < warmup:
                assert hooks.average_ is None
                continue
            averaged += diff is not None
            assert list(diff) == [k for k, p in ours.named_parameters() if p.ndim >= 2]
            for key, a in zip(diff, hooks.average_):
                torch.testing.assert_close(a, diff[key], rtol=0, atol=1e-6,
                                           msg=f"P of {key} ({where})")
    assert averaged == (epochs - warmup) * per_epoch  # six DOE steps, five of them averaging


def test_warmup_step_is_ce_plus_oe():
    from oodbench.losses import create

    net = _net().train()
    x_in, x_out, y = _data()
    before = copy.deepcopy(net)
    out = before(torch.cat([x_in, x_out]))
    expected = F.cross_entropy(out[:6], y) - (out[6:].mean(1) - torch.logsumexp(out[6:], 1)).mean()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    value = DOEHooks(create("doe", warmup=2)).step(_batch(net, opt, epoch=1))
    torch.testing.assert_close(value, expected.detach())  # float32: the dtype's defaults
    assert not torch.equal(net[0].weight, before[0].weight)  # one optimiser step was taken


def test_doe_resumes_after_a_crash_to_the_same_weights(tmp_path, monkeypatch):
    straight = method_run(str(tmp_path / "straight"), "doe", epochs=3)
    calls = {"n": 0}
    original = DOEHooks.state

    def crash_in_epoch_two(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(DOEHooks, "state", crash_in_epoch_two)
    with pytest.raises(KeyboardInterrupt):
        method_run(str(tmp_path / "crashed"), "doe", epochs=3)
    monkeypatch.setattr(DOEHooks, "state", original)
    assert json.loads((tmp_path / "crashed" / "train.json").read_text())["epochs_done"] == 1
    resumed = method_run(str(tmp_path / "crashed"), "doe", epochs=3)
    a, b = resumed.model.state_dict(), straight.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]
    assert (tmp_path / "crashed" / "method.safetensors").is_file()


def test_doe_without_outliers_is_an_error_before_training(tmp_path):
    with pytest.raises(InvalidInputError, match="needs an outlier source") as err:
        train(SmallCNN(6), DigitsSource(range(6)), out=tmp_path / "d", loss="doe", progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "d").exists()


class _TokenNet(nn.Module):
    """A ViT-like stand-in: a position embedding and a class token (parameters of 2+ dimensions
    whose names do not contain "weight"), dropout, a weight matrix; records every forward's
    position embedding and weight."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.pos_embed = nn.Parameter(torch.randn(1, 36))
        self.cls_token = nn.Parameter(torch.randn(1, 1, 4))
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(36 + 4, 5)
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((self.pos_embed.detach().clone(), self.fc.weight.detach().clone()))
        tokens = torch.cat([x.flatten(1) + self.pos_embed, self.cls_token[0].expand(len(x), 4)], 1)
        return self.fc(self.drop(tokens))


def _official_proxy_direction(net: nn.Module, x: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """doe_final.py:144-173 re-stated: a proxy copy *without dropout* (``dropRate=0``) in train
    mode takes one SGD step of lr 1 down (d l_sur / d scale)^2; ``diff_in_weights`` keeps the
    parameters of more than one dimension with "weight" in their name."""
    proxy = copy.deepcopy(net)
    for m in proxy.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return _official_direction(net, proxy, x, n)


def _official_direction(net: nn.Module, proxy: nn.Module, x: torch.Tensor,
                        n: int) -> dict[str, torch.Tensor]:
    """The official proxy step (doe_final.py): ``proxy`` (a copy of ``net``) in train mode takes
    one SGD step (lr 1) on the squared gradient of the surrogate OE loss of the outliers
    ``x[n:]`` with respect to a unit output scale; the direction of each weight matrix is its
    move rescaled to the norm of ``net``'s."""
    proxy.train()
    scale = torch.ones(1, requires_grad=True)
    out = proxy(x) * scale
    l_sur = (out[n:].mean(1) - torch.logsumexp(out[n:], dim=1)).mean()
    reg = torch.sum(torch.autograd.grad(l_sur, [scale], create_graph=True)[0] ** 2)
    opt = torch.optim.SGD(proxy.parameters(), lr=1)
    opt.zero_grad()
    reg.backward()
    opt.step()
    direction = {}
    for (k, old), (_, moved) in zip(net.state_dict().items(), proxy.state_dict().items()):
        if old.ndim > 1 and "weight" in k:
            step = moved - old
            direction[k] = old.norm() / (step.norm() + OFFICIAL_EPS) * step
    return direction


def test_perturbation_runs_without_dropout_on_weight_named_matrices_only():
    """Only ``fc.weight`` is perturbed (not ``pos_embed`` / ``cls_token``), and the direction is
    the dropout-free proxy's: with dropout on it would differ from it (and between calls)."""
    net = _TokenNet().train()
    x_in, x_out, _ = _data()
    x = torch.cat([x_in, x_out])
    weights = perturbed_parameters(net, list(net.parameters()))
    assert [k for k, p in net.named_parameters() if any(p is w for w in weights)] == ["fc.weight"]
    expected = _official_proxy_direction(net, x, 6)
    assert list(expected) == ["fc.weight"]
    first = perturbation(net, x, 6, weights)
    second = perturbation(net, x, 6, weights)
    assert net.drop.training  # dropout is back on for the loop's own passes
    # float32 autograd through the second-order graph against the proxy's first-order step
    torch.testing.assert_close(first[0], expected["fc.weight"], rtol=1e-4, atol=1e-6)
    assert torch.equal(first[0], second[0])  # no dropout mask drawn: the same direction


def test_doe_step_leaves_pos_embed_and_cls_token_unperturbed():
    """In the OE pass at theta + gamma P (the step's second forward) the position embedding
    is theta's while the weight matrix is moved."""
    from oodbench.losses import create

    net = _TokenNet().train()
    pos, weight = net.pos_embed.detach().clone(), net.fc.weight.detach().clone()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    DOEHooks(create("doe", warmup=0)).step(_batch(net, opt, epoch=0))
    assert len(net.seen) == 3  # perturbation, OE at theta + gamma P, CE at theta
    oe_pos, oe_weight = net.seen[1]
    assert torch.equal(oe_pos, pos)
    assert not torch.equal(oe_weight, weight)


def test_dropout_off_covers_timms_drop_modules_and_restores_modes():
    from timm.layers import DropPath, PatchDropout

    net = nn.Sequential(nn.Dropout(0.5), DropPath(0.5), PatchDropout(0.5), nn.BatchNorm1d(3)).train()
    with dropout_off(net):
        assert [m.training for m in net] == [False, False, False, True]  # BatchNorm untouched
    assert all(m.training for m in net)
