"""LINe against an independent implementation that mirrors the official code: Taylor
(first-order Shapley) scores by autograd on the real linear layer, per-class masks with
np.percentile, and a per-sample forward like the official ``RouteLUNCH`` layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench.detectors import create
from oodbench.errors import ClassCountMismatchError
from tests._tolerance import assert_within
from tests.detectors._reference import head_energy_reference
from tests.detectors.conftest import make_activations


def _reference_line(train, acts, clip_p, p_w, p_a):
    fc = torch.nn.Linear(train.features.shape[1], train.num_classes).double()
    with torch.no_grad():
        fc.weight.copy_(torch.as_tensor(train.head_weight, dtype=torch.float64))
        fc.bias.copy_(torch.as_tensor(train.head_bias, dtype=torch.float64))
    # Taylor scores a * d z_y / d a per training sample (unclipped), averaged per class
    taylor = np.zeros(train.features.shape)
    for i, (a, y) in enumerate(zip(train.features, train.labels)):
        a = torch.as_tensor(a, dtype=torch.float64).requires_grad_(True)
        fc(a)[y].backward()
        taylor[i] = (a * a.grad).detach().numpy()
    shap = np.stack([taylor[train.labels == c].mean(axis=0) for c in range(train.num_classes)])
    w = train.head_weight.astype(np.float64)
    masked_w, mask_f = [], []
    for c in range(train.num_classes):
        matrix = np.abs(shap[c]) * w
        masked_w.append(w * (matrix > np.percentile(matrix, p_w)))
        mask_f.append(shap[c] > np.percentile(shap[c], p_a))
    clip = np.percentile(train.features.astype(np.float64), clip_p)
    scores, bounds = [], []
    for a in acts.features.astype(np.float64):
        a = np.minimum(a, clip)
        pred = int(np.argmax(a @ w.T + train.head_bias))
        score, bound = head_energy_reference((a * mask_f[pred])[None], masked_w[pred], train.head_bias)
        scores.append(score[0])
        bounds.append(bound[0])  # float32 head product (oodbench.compute)
    return np.array(scores), np.array(bounds)


@pytest.mark.parametrize(("clip_p", "p_w", "p_a"), [(90.0, 10.0, 10.0), (95.0, 40.0, 30.0)])
def test_matches_reference(id_train, id_test, ood_test, clip_p, p_w, p_a):
    det = create("line", clip_percentile=clip_p, weight_sparsity=p_w, activation_sparsity=p_a)
    det.fit(id_train)
    for acts in (id_test, ood_test):
        expected, bound = _reference_line(id_train, acts, clip_p, p_w, p_a)
        assert_within(det.score(acts), expected, bound)


def test_class_without_training_samples_and_bad_labels(id_test):
    train = make_activations(200, 10, 32, seed=7)
    train = train.subset(train.labels != 3)  # class 3 is never seen
    scores = create("line").fit(train).score(id_test)
    assert np.isfinite(scores).all()
    train.labels = train.labels.copy()
    train.labels[0] = 10
    with pytest.raises(ClassCountMismatchError, match="10 classes"):
        create("line").fit(train)


@pytest.mark.parametrize("q", [10.0, 0.0, 37.5, 100.0])
def test_weight_cuts_are_numpys_percentiles_to_the_last_bit(q, monkeypatch):
    """The per-class thresholds of M_c equal np.percentile over all C x D products |S_c.| W,
    bit for bit: through the sampled bracket (a head large enough that the sample is a subset),
    through the exact fallback when no bracket holds, and on the torch path; with tied weights
    and units of zero importance."""
    from oodbench import compute
    from oodbench.detectors import _shaping, line

    # the bracket samples the products of evenly spaced head rows: 2**13 entries = 16 of these
    # 96 rows of 512, so the sample is a strict subset as it is for a real head (a 1,000 x 2,048
    # head under the shipped 2**17), at a 20th of the work of a head that size
    monkeypatch.setattr(line, "_CUT_SAMPLE", 2**13)
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((96, 512))
    weight[:, :40] = np.round(weight[:, :40], 1)  # many tied products
    importance = np.abs(rng.standard_normal((96, 512))) * (rng.random((96, 512)) > 0.05)
    expected = np.array([np.percentile(importance[c] * weight, q) for c in range(96)])
    w, imp = torch.from_numpy(weight), torch.from_numpy(importance)
    # portable bit for bit: no sums, only products, selections and NumPy's interpolation
    # formula, each an elementwise IEEE operation with one correctly rounded result
    with compute.use("numpy"):
        np.testing.assert_array_equal(line.weight_cuts(imp, w, q).numpy(), expected)
        monkeypatch.setattr(_shaping, "_BRACKET_LIMIT", 0)  # every bracket fails: the fallback
        np.testing.assert_array_equal(line.weight_cuts(imp, w, q).numpy(), expected)
    with compute.use("torch", device="cpu"):
        np.testing.assert_array_equal(line.weight_cuts(imp, w, q).numpy(), expected)
