"""CMA's loss against a NumPy re-statement of the official computation, and FLYP (open_clip's
ClipLoss, the symmetric contrastive loss FLYP fine-tunes with) at lam = 0."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.special import logsumexp

from oodbench.errors import InvalidInputError
from oodbench.losses import create
from oodbench.losses.cma import cma_loss


def _embeddings(b=12, d=16, seed=0):
    rng = np.random.default_rng(seed)
    u, v = rng.normal(size=(b, d)), rng.normal(size=(b, d))
    v[3] = v[5]  # two samples of one class: the same prompt embedding
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return u, v


def official(logits: np.ndarray, lam: float) -> float:
    """ma-kjh/CMA-OoDD utils/train_utils.py, restated: (CE_text + lam * mean(-LSE rows of the
    text logits)) / 2 + (CE_image + lam * mean(-LSE rows of the image logits)) / 2, with the
    diagonal as every row's target."""
    per_text = logits.T
    ce_image = np.mean(logsumexp(logits, axis=1) - np.diag(logits))
    ce_text = np.mean(logsumexp(per_text, axis=1) - np.diag(per_text))
    return ((ce_text + lam * np.mean(-logsumexp(per_text, axis=1))) / 2
            + (ce_image + lam * np.mean(-logsumexp(logits, axis=1))) / 2)


@pytest.mark.parametrize("lam", [0.0, 0.001, 0.5])
def test_equals_the_official_computation(lam):
    u, v = _embeddings()
    logits = 100.0 * u @ v.T
    value = create("cma", lam=lam)(torch.tensor(logits), torch.arange(len(u)))
    np.testing.assert_allclose(float(value), official(logits, lam), rtol=1e-12)


def test_is_flyps_contrastive_loss_at_lam_zero():
    from open_clip.loss import ClipLoss

    u, v = (torch.tensor(a) for a in _embeddings(seed=1))
    scale = torch.tensor(37.0)
    flyp = ClipLoss()(u, v, scale)
    np.testing.assert_allclose(float(cma_loss(scale * u @ v.T, 0.0)), float(flyp), rtol=1e-12)
    # lam > 0 lowers the loss by lam/(2B) * sum of the rows' and columns' log-sum-exp
    logits = scale * u @ v.T
    lse = torch.logsumexp(logits, 1).sum() + torch.logsumexp(logits, 0).sum()
    np.testing.assert_allclose(float(cma_loss(logits, 0.2)),
                               float(flyp) - 0.2 / (2 * len(u)) * float(lse), rtol=1e-12)


def test_same_class_pairs_count_as_negatives():
    """Samples 3 and 5 share a prompt: row 3's target is column 3 only, so the loss is larger
    than a version that counted column 5 as a positive too."""
    u, v = _embeddings()
    logits = torch.tensor(20.0 * u @ v.T)
    value = cma_loss(logits, 0.0)
    row3 = torch.logsumexp(logits[3], 0) - logits[3, 3]
    assert row3 > torch.logsumexp(logits[3], 0) - torch.logsumexp(logits[3, [3, 5]], 0)
    expected = 0.5 * (F.cross_entropy(logits, torch.arange(12))
                      + F.cross_entropy(logits.T, torch.arange(12)))
    assert torch.equal(value, expected)


def test_defaults_and_bad_options():
    loss = create("cma")
    assert (loss.lam, loss.train_prompt, loss.warmup_steps) == (0.001, "a photo of a {}", 500)
    with pytest.raises(InvalidInputError, match="lam must be >= 0"):
        create("cma", lam=-1)
    with pytest.raises(InvalidInputError, match="train_prompt"):
        create("cma", train_prompt="a photo")
    with pytest.raises(InvalidInputError, match=r"square \(B, B\)"):
        loss(torch.zeros(3, 4), torch.arange(3))
