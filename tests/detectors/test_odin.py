"""ODIN against a per-image autograd computation of the paper's formula and pytorch-ood 0.4.0,
on a tiny real network run through the extraction DataLoader machinery."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import ODIN as PoodODIN
from torchvision import transforms

from oodbench.detectors import NotFittedError, create
from oodbench.detectors.odin import normalisation_std
from oodbench.errors import InvalidInputError
from tests.detectors._shaping_fixtures import live_setup, transformed


def _normalised(model, std=0.25):
    model.transform = transforms.Compose([model.transform, transforms.Normalize([0.5], [std])])
    return model


def _manual_odin(model, x, temperature, epsilon, std):
    """One image at a time: x' = x - eps * sign(grad_x -log softmax(z / T)_y) / std."""
    scores = []
    for xi in x:
        xi = xi[None].clone().requires_grad_(True)
        z = model(xi)
        y = int(z.argmax())
        loss = -torch.log_softmax(z / temperature, dim=1)[0, y]
        (grad,) = torch.autograd.grad(loss, xi)
        x_hat = xi.detach() - epsilon * torch.sign(grad) / std
        with torch.no_grad():
            scores.append(torch.softmax(model(x_hat).double() / temperature, dim=1).max().item())
    return np.array(scores)


def test_presets_and_overrides():
    assert create("odin").hyperparams["temperature"] == 2.0  # C-OOD preset is the default
    assert create("odin").hyperparams["epsilon"] == 1e-5
    odin = create("odin", preset="odin")
    assert (odin.temperature, odin.epsilon) == (1000.0, 0.0014)
    mixed = create("odin", preset="odin", epsilon=0.0)
    assert (mixed.temperature, mixed.epsilon) == (1000.0, 0.0)
    explicit = create("odin", preset=None, temperature=5.0, epsilon=0.01)
    assert explicit.hyperparams["preset"] is None
    with pytest.raises(InvalidInputError, match="preset"):
        create("odin", preset="paper")
    with pytest.raises(InvalidInputError, match="both temperature and epsilon"):
        create("odin", preset=None, temperature=5.0)


@pytest.mark.parametrize(("temperature", "epsilon"), [(2.0, 0.05), (1000.0, 0.0014)])
def test_matches_manual_autograd_and_pytorch_ood(temperature, epsilon):
    model, source, acts = live_setup(12)
    _normalised(model)
    det = create("odin", preset=None, temperature=temperature, epsilon=epsilon, batch_size=5,
                 device="cpu").fit(None, model=model)
    assert det.input_std_ == (0.25,)
    ours = det.score(acts)
    x = transformed(model, source)
    np.testing.assert_allclose(ours, _manual_odin(model, x, temperature, epsilon, 0.25), rtol=1e-5)
    ref = PoodODIN(model, eps=epsilon, temperature=temperature, norm_std=[0.25])
    np.testing.assert_allclose(ours, -ref.predict(x).detach().double().numpy(), rtol=1e-5)


def test_perturbation_matters_and_rows_follow_source_indices():
    model, _, acts = live_setup(9)
    base = dict(preset=None, temperature=2.0, device="cpu")
    perturbed = create("odin", epsilon=0.05, **base).fit(None, model=model).score(acts)
    plain = create("odin", epsilon=0.0, **base).fit(None, model=model).score(acts)
    assert np.abs(perturbed - plain).max() > 1e-4
    assert (perturbed >= plain - 1e-6).mean() > 0.5  # the step raises the predicted class
    order = np.array([4, 0, 7, 4])
    again = create("odin", epsilon=0.05, **base).fit(None, model=model).score(acts.subset(order))
    np.testing.assert_allclose(again, perturbed[order], rtol=1e-6)
    assert not model.training  # the model's mode is restored


def test_needs_model_and_source():
    model, _, acts = live_setup(4)
    with pytest.raises(InvalidInputError, match="live network"):
        create("odin").fit(None)
    with pytest.raises(NotFittedError):
        create("odin").score(acts)
    acts.source = None
    with pytest.raises(InvalidInputError, match="no source"):
        create("odin", device="cpu").fit(None, model=model).score(acts)


def test_normalisation_std_lookup():
    assert normalisation_std(transforms.Compose([transforms.Normalize([0.1, 0.2, 0.3],
                                                                      [0.4, 0.5, 0.6])])) == (
        pytest.approx(0.4), pytest.approx(0.5), pytest.approx(0.6))
    assert normalisation_std(lambda x: x) is None
    model, _, _ = live_setup(2)
    assert create("odin").fit(None, model=model).input_std_ == (1.0,)
    assert create("odin", input_std=(0.3,)).fit(None, model=model).input_std_ == (0.3,)
