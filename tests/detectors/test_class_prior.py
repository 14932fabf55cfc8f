"""RP / RW class-prior scores (Jiang et al., ICML 2023) against a direct NumPy re-statement of
the official ``funcs.py`` computations, RP-GradNorm also against autograd, on an imbalanced
training set (on a balanced one RP would equal the original scores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench.detectors import create
from oodbench.errors import EmptyInputError
from oodbench.extract.activations import Activations
from tests._tolerance import assert_within
from tests.detectors._reference import energy_error
from tests.detectors._shaping_fixtures import live_setup
from tests.detectors.conftest import make_activations

C, D = 6, 24
#: class frequencies of the imbalanced fit set (class 5 is absent: pi_5 = 0)
SHARES = np.array([0.5, 0.25, 0.12, 0.08, 0.05, 0.0])


def _imbalanced(n: int = 400, seed: int = 3) -> Activations:
    acts = make_activations(n, C, D, seed=seed)
    labels = np.repeat(np.arange(C), np.round(SHARES * n).astype(int))[:n]
    return Activations(logits=acts.logits[: len(labels)], labels=labels,
                       ids=acts.ids[: len(labels)], features=acts.features[: len(labels)],
                       head_weight=acts.head_weight, head_bias=acts.head_bias, meta=acts.meta)


def _official_prior(labels: np.ndarray) -> np.ndarray:
    """test_ood.py: counts of each class id in the ID label list over their sum."""
    counts = np.array([np.sum(labels == c) for c in range(C)], dtype=np.float64)
    return counts / counts.sum()


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sim(p: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """The official re-weighting: sum(-p * pi) / (|p| |pi|) + 1."""
    return (-p * pi[None]).sum(axis=1) / (np.linalg.norm(p, axis=1) * np.linalg.norm(pi)) + 1


@pytest.fixture
def data():
    train = _imbalanced()
    test = make_activations(60, C, D, seed=11)
    ood = make_activations(40, C, D, seed=12, ood=True)
    return train, test, ood, _official_prior(train.labels)


def test_prior_is_the_training_label_frequencies(data):
    train, _, _, pi = data
    det = create("rp_msp").fit(train)
    # counts over their sum: one float64 division each
    np.testing.assert_allclose(det.prior_, SHARES, atol=1e-12)
    np.testing.assert_allclose(det.prior_, pi)
    assert det.fit_data == "train"


def test_rp_msp_matches_official(data):
    train, test, ood, pi = data
    det = create("rp_msp").fit(train)
    for acts in (test, ood):
        ref = (_softmax(acts.logits.astype(np.float64)) - pi[None]).max(axis=1)
        # float64 softmaxes (~1e-16) minus the prior: p - pi may be ~0, hence the atol
        np.testing.assert_allclose(det.score(acts), ref, rtol=1e-6, atol=1e-12)
    # differs from MSP - 1/C on an imbalanced prior (ranking too)
    msp = create("msp").score(test)
    assert not np.allclose(det.score(test), msp - 1 / C, atol=1e-3)


def test_rp_gradnorm_matches_official_and_autograd(data):
    train, test, ood, pi = data
    det = create("rp_gradnorm").fit(train)
    fc = torch.nn.Linear(D, C).double()
    with torch.no_grad():
        fc.weight.copy_(torch.as_tensor(test.head_weight, dtype=torch.float64))
        fc.bias.copy_(torch.as_tensor(test.head_bias, dtype=torch.float64))
    target = torch.as_tensor(pi)
    for acts in (test, ood):
        f = acts.features.astype(np.float64)
        official = (np.abs(f).sum(1) * np.abs(pi[None] - _softmax(acts.logits.astype(np.float64))).sum(1)
                    / D / C)  # iterate_data_gradnorm_custom with 2048 -> D
        ours = det.score(acts)
        # float64 both, sums of absolute values: ~1e-15 relative
        np.testing.assert_allclose(ours, official, rtol=1e-6)
        grads = []
        for row in torch.as_tensor(f):
            fc.zero_grad()
            log_p = torch.log_softmax(fc(row), dim=0)
            kl = torch.where(target > 0, target * (target.clamp_min(1e-300).log() - log_p), 0.0).sum()
            kl.backward()
            grads.append(fc.weight.grad.abs().mean().item())  # mean |d KL(pi || p) / d W|
        np.testing.assert_allclose(ours, grads, rtol=1e-5)


def test_rp_gradnorm_on_a_balanced_prior_is_gradnorm(data):
    _, test, _, _ = data
    balanced = make_activations(C * 20, C, D, seed=5)
    balanced = Activations(logits=balanced.logits, labels=np.repeat(np.arange(C), 20),
                           ids=balanced.ids, features=balanced.features)
    rp = create("rp_gradnorm").fit(balanced).score(test)
    # the same float64 sums of absolute values, with 20/120 against 1/6: a few ulps
    np.testing.assert_allclose(rp * D * C, create("gradnorm").score(test), rtol=1e-9)


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_rw_energy_matches_official(data, temperature):
    train, test, ood, pi = data
    det = create("rw_energy", temperature=temperature).fit(train)
    for acts in (test, ood):
        z = acts.logits.astype(np.float64)
        conf = temperature * np.log(np.exp(z / temperature).sum(axis=1))
        sim = _sim(_softmax(z), pi)
        # the energy's float32 exps (oodbench.compute), times a factor in [0, 2]; -E may be
        # near 0 (the count below), so the bound is absolute
        assert_within(det.score(acts), conf * sim,
                      energy_error(acts.logits, temperature) * np.abs(sim) + 1e-15 * np.abs(conf))
        assert det.negative_energies_ == int((conf < 0).sum())


def test_rw_energy_counts_negative_energies(data):
    """With -E < 0 the factor in [0, 1] raises the score: the detector says how often."""
    train, test, _, _ = data
    shifted = Activations(logits=test.logits - 50.0, labels=test.labels, ids=test.ids)
    det = create("rw_energy").fit(train)
    det.score(shifted)
    assert det.negative_energies_ == len(test)


def _official_rw_odin(model, x: torch.Tensor, eps: float, temper: float, pi: np.ndarray) -> np.ndarray:
    """funcs.py ``iterate_data_odin_custom`` (tmlr-group/class_prior @ dc1eb9c, lines 90-124),
    re-stated for one batch: the prior factor from the unperturbed softmax, the mean
    cross-entropy of z / T against argmax z, the step ``x - eps * ((grad >= 0) - 0.5) * 2``
    (lines 109-114: a raw sign step, not divided by the normalisation std), ``sim * max``
    of the softmax at T of the perturbed input."""
    x = x.clone().requires_grad_(True)
    outputs = model(x)
    sim = _sim(_softmax(outputs.detach().double().numpy()), pi)
    labels = outputs.detach().argmax(dim=1)
    torch.nn.functional.cross_entropy(outputs / temper, labels).backward()
    gradient = (torch.ge(x.grad, 0).float() - 0.5) * 2
    with torch.no_grad():
        perturbed = model(x.detach() - eps * gradient).double().numpy() / temper
    return sim * _softmax(perturbed).max(axis=1)


def test_rw_odin_takes_the_official_raw_sign_step():
    """On a model whose transform normalises (std 0.25), the official step is eps * sign on the
    normalised input; ODIN's step eps * sign / std would be 4 times larger."""
    from torchvision import transforms

    model, source, _ = live_setup(12)
    model.transform = transforms.Compose([model.transform, transforms.Normalize([0.5], [0.25])])
    model.eval()
    x = torch.stack([model.transform(source.load(i)) for i in range(len(source))])
    with torch.no_grad():
        logits = model(x).numpy()
    acts = Activations(logits=logits, labels=np.asarray(source.labels), ids=np.array(source.ids),
                       source=source, source_indices=np.arange(len(source)))
    train = Activations(logits=logits, labels=np.array([0] * 9 + [1] * 2 + [2]), ids=acts.ids)
    pi = np.array([9, 2, 1]) / 12
    # T = 1000 (the official default) flattens the softmax so much that any step moves the
    # score by ~1e-6; T = 2 makes the step's size visible
    for temperature, eps in ((1000.0, 0.0), (1000.0, 0.05), (2.0, 0.05)):
        det = create("rw_odin", temperature=temperature, epsilon=eps, device="cpu").fit(train, model)
        official = _official_rw_odin(model, x, eps, temperature, pi)
        # the same float32 network operations, the softmax in float64: rounding only
        # (measured <= 1e-15 relative)
        np.testing.assert_allclose(det.score(acts), official, rtol=1e-6, atol=0)
    # the step of ODIN's code (divided by the std, here 4 times larger) gives other scores
    pixel = create("rw_odin", temperature=2.0, epsilon=0.05, input_std=None,
                   device="cpu").fit(train, model)
    assert pixel.input_std_ == (0.25,)
    assert np.abs(pixel.score(acts) - official).max() > 10 * 1e-6 * np.abs(official).max()
    assert create("rw_odin").epsilon == 0.0  # the official script's default (test_ood.py:307)


def test_fit_without_labels_is_a_clear_error(data):
    _, test, _, _ = data
    unlabelled = Activations(logits=test.logits, labels=np.full(len(test), -1), ids=test.ids,
                             features=test.features)
    for name in ("rp_msp", "rp_gradnorm", "rw_energy"):
        with pytest.raises(EmptyInputError, match="class prior pi from the training labels"):
            create(name).fit(unlabelled)
