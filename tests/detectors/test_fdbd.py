import numpy as np
import pytest
import torch

from oodbench.detectors import NotFittedError, create
from oodbench.errors import MissingActivationError
from tests.detectors._reference import assert_rel, linear, pod, tensor


def _closed_form(train, acts) -> np.ndarray:
    w, b = acts.head_weight.astype(np.float64), acts.head_bias.astype(np.float64)
    mu = train.features.astype(np.float64).mean(axis=0)
    out = []
    for f in acts.features.astype(np.float64):
        z = w @ f + b
        y = int(z.argmax())
        dist = [abs(z[y] - z[c]) / np.linalg.norm(w[y] - w[c]) for c in range(len(z)) if c != y]
        out.append(np.mean(dist) / np.linalg.norm(f - mu))
    return np.array(out)


def test_matches_pytorch_ood_and_closed_form(id_train, id_test, ood_test):
    det = create("fdbd").fit(id_train)
    ref = pod().fDBD(None, head=linear(id_train)).fit_features(tensor(id_train.features))
    for acts in (id_test, ood_test):
        ours = det.score(acts)
        # pytorch-ood runs in float32: ~1e-6 relative
        assert_rel(ours, -ref.predict_features(tensor(acts.features, torch.float32)), rtol=1e-5)
        # ours reads the stored float32 logits, the closed form recomputes them in float64: the
        # logits' float32 rounding (fixed data, the same bits on every CPU) moves the scores
        # by up to 6e-8 relative here; what differs between CPUs is float64 rounding (~1e-15)
        np.testing.assert_allclose(ours, _closed_form(id_train, acts), rtol=1e-6)


def test_hand_computed(make_acts):
    """Two classes, w = +-e1, b = 0: the boundary is x1 = 0 and the distance is |x1|."""
    train = make_acts(2, 2, 2)
    train.features[:] = [[1.0, 0.0], [-1.0, 0.0]]  # mean 0
    train.head_weight[:] = [[1.0, 0.0], [-1.0, 0.0]]
    train.head_bias[:] = 0.0
    acts = train.subset([0, 1])
    acts.features = np.array([[3.0, 4.0], [-0.5, 0.0]], dtype=np.float32)
    acts.logits = acts.features @ acts.head_weight.T
    # small integers, a square root and divisions: a few float64 ulps on any CPU
    np.testing.assert_allclose(create("fdbd").fit(train).score(acts), [3 / 5, 1.0], rtol=1e-12)


def test_errors(make_acts, id_test):
    with pytest.raises(NotFittedError):
        create("fdbd").score(id_test)
    with pytest.raises(MissingActivationError):
        create("fdbd").fit(make_acts(10, 3, 4, with_head=False))
