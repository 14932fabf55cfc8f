"""DOE's step against a direct re-statement of the official doe_final.py / utils_awp.py
computations: the scale gradient, the normalised perturbation, theta restored exactly, one
whole step, resume after a crash, and the outlier source required before training."""

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
from oodbench.train.doe import DOEHooks, perturbation, scale_gradient
from oodbench.train.hooks import Batch
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
