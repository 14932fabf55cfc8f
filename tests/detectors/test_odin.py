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


def test_defaults_presets_and_overrides():
    assert create("odin").hyperparams["temperature"] == 1000.0  # the ODIN paper's setting
    assert create("odin").hyperparams["epsilon"] == 0.0014
    cood = create("odin", preset="cood")
    assert (cood.temperature, cood.epsilon, cood.gradient) == (2.0, 1e-5, "logits")
    mixed = create("odin", preset="cood", epsilon=0.0)
    assert (mixed.temperature, mixed.epsilon) == (2.0, 0.0)
    with pytest.raises(InvalidInputError, match="temperature must be > 0"):
        create("odin", temperature=0.0)
    with pytest.raises(InvalidInputError, match="gradient must be one of"):
        create("odin", gradient="features")
    with pytest.raises(InvalidInputError, match="sign_at_zero"):
        create("odin", sign_at_zero=-1)


@pytest.mark.parametrize(("temperature", "epsilon"), [(2.0, 0.05), (1000.0, 0.0014)])
def test_matches_manual_autograd_and_pytorch_ood(temperature, epsilon):
    model, source, acts = live_setup(12)
    _normalised(model)
    det = create("odin", temperature=temperature, epsilon=epsilon, sign_at_zero=0, batch_size=5,
                 device="cpu").fit(None, model=model)
    assert det.input_std_ == (0.25,)
    ours = det.score(acts)
    x = transformed(model, source)
    # float32 network passes in other batches (~1e-7 relative); a gradient sign that rounding
    # flips sits where the gradient is ~0, so it moves the score by ~0 too
    np.testing.assert_allclose(ours, _manual_odin(model, x, temperature, epsilon, 0.25), rtol=1e-5)
    ref = PoodODIN(model, eps=epsilon, temperature=temperature, norm_std=[0.25])
    np.testing.assert_allclose(ours, -ref.predict(x).detach().double().numpy(), rtol=1e-5)


def test_perturbation_matters_and_rows_follow_source_indices():
    model, _, acts = live_setup(9)
    base = dict(temperature=2.0, device="cpu")
    perturbed = create("odin", epsilon=0.05, **base).fit(None, model=model).score(acts)
    plain = create("odin", epsilon=0.0, **base).fit(None, model=model).score(acts)
    assert np.abs(perturbed - plain).max() > 1e-4
    assert (perturbed >= plain - 1e-6).mean() > 0.5  # the step raises the predicted class
    order = np.array([4, 0, 7, 4])
    again = create("odin", epsilon=0.05, **base).fit(None, model=model).score(acts.subset(order))
    np.testing.assert_allclose(again, perturbed[order], rtol=1e-6)  # other batches: ~1e-7 (above)
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


def test_sign_at_zero_follows_the_odin_code():
    """``sign_at_zero=1`` steps by +1 where the gradient is exactly 0 (``(grad >= 0) * 2 - 1``)."""
    from oodbench.detectors.odin import odin_perturb

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    with torch.no_grad():
        model[1].weight[:, 0] = 0.0  # no gradient reaches input 0
    x = torch.randn(2, 1, 2, 2)
    std = torch.tensor([1.0])
    step_one = odin_perturb(model, x, 1.0, 0.1, std, sign_at_zero=1) - x
    step_zero = odin_perturb(model, x, 1.0, 0.1, std, sign_at_zero=0) - x
    # (x - 0.1) - x in float32 is -0.1 to an ulp of x: the float32 defaults (atol 1e-5) hold it
    torch.testing.assert_close(step_one.reshape(2, -1)[:, 0], torch.full((2,), -0.1))  # x - eps * (+1)
    torch.testing.assert_close(step_zero.reshape(2, -1)[:, 0], torch.zeros(2))
    torch.testing.assert_close(step_one.reshape(2, -1)[:, 1:], step_zero.reshape(2, -1)[:, 1:])


def _rgb_live(n: int = 4):
    """A small random 3-channel CNN (ImageNet normalisation, 16 px) wrapped as a Classifier."""
    from oodbench.data import ArraySource
    from oodbench.extract.activations import Activations
    from oodbench.models import wrap

    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.add_module("conv", torch.nn.Conv2d(3, 8, 3, padding=1))
    net.add_module("relu", torch.nn.ReLU())
    net.add_module("pool", torch.nn.AdaptiveAvgPool2d(1))
    net.add_module("flat", torch.nn.Flatten())
    net.add_module("fc", torch.nn.Linear(8, 5))
    transform = transforms.Compose([transforms.Resize(16), transforms.ToTensor(),
                                    transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    model = wrap(net, feature_layer=None, head_layer="fc", transform=transform)
    rng = np.random.default_rng(0)
    source = ArraySource(rng.integers(0, 256, size=(n, 16, 16, 3), dtype=np.uint8), list(range(n)))
    acts = Activations(logits=np.zeros((n, 5), np.float32), labels=np.arange(n), ids=np.array(source.ids),
                       source=source, source_indices=np.arange(n, dtype=np.int64))
    return model, source, acts


def test_openood_and_cood_code_presets_match_their_reference_computations():
    """``preset="openood"`` against OpenOOD's ``ODINPostprocessor`` and ``preset="cood_code"``
    against the C-OOD code's ODIN, both re-stated in tests/oracles/protocol_reference.py."""
    from tests.oracles import protocol_reference as ref

    model, source, acts = _rgb_live()
    x = transformed(model, source)
    std = normalisation_std(model.transform)
    assert std is not None
    openood = create("odin", preset="openood", device="cpu").fit(None, model=model)
    # float32 network passes, as above
    np.testing.assert_allclose(openood.score(acts), ref.openood_odin(model, x, 1000.0, 0.0014, std),
                               rtol=1e-5)
    code = create("odin", preset="cood_code", device="cpu").fit(None, model=model)
    np.testing.assert_allclose(code.score(acts), ref.cood_code_odin(model, x, 2.0, 1e-5), rtol=1e-5)
    # the code's gradient differs from the ODIN paper's: other perturbed scores at the same T, eps
    paper_like = create("odin", preset="cood", device="cpu").fit(None, model=model).score(acts)
    assert np.abs(paper_like - code.score(acts)).max() > 0
