"""GradNorm's closed form against torch.autograd on the actual linear layer and pytorch-ood."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import GradNorm as PoodGradNorm

from oodbench.detectors import create
from oodbench.errors import InvalidInputError


def _linear(acts):
    fc = torch.nn.Linear(acts.features.shape[1], acts.num_classes).double()
    with torch.no_grad():
        fc.weight.copy_(torch.as_tensor(acts.head_weight, dtype=torch.float64))
        fc.bias.copy_(torch.as_tensor(acts.head_bias, dtype=torch.float64))
    return fc


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_matches_autograd_on_the_linear_layer(id_test, ood_test, temperature):
    for acts in (id_test, ood_test):
        fc = _linear(acts)
        expected = []
        for f in torch.as_tensor(acts.features, dtype=torch.float64):
            fc.zero_grad()
            log_p = torch.log_softmax(fc(f) / temperature, dim=0)
            u = torch.full_like(log_p, 1.0 / acts.num_classes)
            kl = (u * (u.log() - log_p)).sum()  # KL(u || softmax(z / T))
            kl.backward()
            expected.append(fc.weight.grad.abs().sum().item())
        ours = create("gradnorm", temperature=temperature).score(acts)
        # float64 both; the scores are sums of absolute values (~1e-14 relative apart)
        np.testing.assert_allclose(ours, expected, rtol=1e-5)


def test_matches_pytorch_ood(id_test):
    fc = _linear(id_test)
    ref = PoodGradNorm(fc, param_filter=lambda name: name == "weight")
    theirs = ref.predict(torch.as_tensor(id_test.features, dtype=torch.float64))
    np.testing.assert_allclose(create("gradnorm").score(id_test), -theirs.numpy(), rtol=1e-5)  # float64 both


def test_errors():
    with pytest.raises(InvalidInputError, match="temperature"):
        create("gradnorm", temperature=0)
