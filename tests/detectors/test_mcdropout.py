"""MC-dropout: the mean softmax equals pytorch-ood's MCD.run_mean under the same seed, scores
are deterministic under a seed, and a model without dropout is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import MCD

from oodbench.detectors import create
from oodbench.detectors.mcdropout import batch_seed
from oodbench.errors import InvalidInputError
from tests.detectors._shaping_fixtures import live_setup, transformed


def test_matches_pytorch_ood_mean_softmax():
    model, source, acts = live_setup(10)
    ours = create("mc_dropout", passes=30, seed=3, batch_size=64, device="cpu")
    ours = ours.fit(None, model=model).score(acts)
    torch.manual_seed(batch_seed(3, 0))  # the seed of our first (and only) batch
    p = MCD.run_mean(model, transformed(model, source), 30).double()
    expected = (p * p.log()).sum(dim=1).numpy()
    # the same dropout masks; float32 passes of the network in another batching: ~1e-7
    np.testing.assert_allclose(ours, expected, rtol=1e-5)
    assert not model.training and not model.dropout.training  # modes restored


def test_deterministic_under_seed_and_random_across_seeds():
    model, _, acts = live_setup(10)
    state = torch.get_rng_state()

    def run(seed, batch_size=4):
        det = create("mc_dropout", passes=5, seed=seed, batch_size=batch_size, device="cpu")
        return det.fit(None, model=model).score(acts)

    first, again, other = run(0), run(0), run(1)
    np.testing.assert_array_equal(first, again)  # the same masks and ops in this process
    assert np.abs(first - other).max() > 1e-6
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is untouched
    # negative entropy: between -log(C) and 0
    assert (first <= 1e-12).all() and (first >= -np.log(3) - 1e-9).all()


def test_refuses_a_model_without_dropout():
    model, _, _ = live_setup(3, dropout=0.0)
    with pytest.raises(InvalidInputError, match="dropout layer"):
        create("mc_dropout").fit(None, model=model)
    with pytest.raises(InvalidInputError, match="passes must be an integer >= 1"):
        create("mc_dropout", passes=0)


def test_timm_functional_dropout_matches_pytorch_ood():
    """timm heads apply ``F.dropout(drop_rate, training=self.training)``; pytorch-ood's
    ``MCD.run_mean`` (whole model in train mode but batch-norm) switches it on the same way."""
    from oodbench.data import ArraySource
    from oodbench.extract.activations import Activations
    from oodbench.models import load

    torch.manual_seed(0)
    model = load("timm:resnet18", pretrained=False, drop_rate=0.5)
    rng = np.random.default_rng(0)
    source = ArraySource(rng.integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8), [0, 1, 2])
    acts = Activations(logits=np.zeros((3, model.num_classes), np.float32),
                       labels=np.array([0, 1, 2]), ids=np.array(source.ids), source=source)
    ours = create("mc_dropout", passes=4, seed=5, device="cpu").fit(None, model=model).score(acts)
    torch.manual_seed(batch_seed(5, 0))
    p = MCD.run_mean(model, transformed(model, source), 4).double()
    np.testing.assert_allclose(ours, (p * p.log()).sum(dim=1).numpy(), rtol=1e-5)  # as above
    assert not model.training and not model.model.training  # modes restored
    # with dropout on, the passes differ: the mean softmax is not one pass's softmax
    with torch.no_grad():
        single = torch.softmax(model(transformed(model, source)).double(), dim=1)
    assert (p - single).abs().max() > 1e-4


def test_vit_drop_rate_is_old_timms_drop_rate_and_the_c_ood_code_entropy():
    """``vit_drop_rate`` switches on exactly old timm's ``drop_rate`` sites of a timm ViT built
    without dropout: the scores equal the C-OOD code's MC-dropout entropy (re-stated in
    tests/oracles/protocol_reference.py) on the same ViT built with timm 1.x's ``pos_drop_rate =
    proj_drop_rate = 0.1``, under the same dropout masks."""
    from oodbench.detectors.mcdropout import legacy_vit_dropout_sites
    from tests.detectors._shaping_fixtures import tiny_vit_setup
    from tests.oracles import protocol_reference as ref

    model, acts, reference, images = tiny_vit_setup(0)
    sites = legacy_vit_dropout_sites(model)
    assert len(sites) == 1 + 2 * 3  # pos_drop + (attn.proj_drop, mlp.drop1, mlp.drop2) x 2 blocks
    with pytest.raises(InvalidInputError, match="dropout"):  # timm 1.x default: no dropout at all
        create("mc_dropout").fit(None, model=model)
    det = create("mc_dropout", preset="cood", passes=5, batch_size=len(images), device="cpu")
    ours = det.fit(None, model=model).score(acts)
    assert all(site.p == 0.0 for site in sites)  # restored after scoring
    reference.eval()
    for m in reference.modules():  # the C-OOD code's enable_dropout
        if m.__class__.__name__.startswith("Dropout"):
            m.train()
    torch.manual_seed(batch_seed(det.seed, 0))
    with torch.no_grad():
        passes = torch.stack([torch.softmax(reference(images).double(), dim=1) for _ in range(5)])
    # the same masks; float32 passes of two builds of one ViT: ~1e-7 relative
    np.testing.assert_allclose(ours, ref.cood_code_mcd_entropy(passes), rtol=1e-6)
    assert (passes[0] - passes[1]).abs().max() > 0  # dropout was on
