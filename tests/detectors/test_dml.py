import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import MissingActivationError


def _max_cosine(f: np.ndarray, w: np.ndarray) -> np.ndarray:
    f, w = f.astype(np.float64), w.astype(np.float64)
    cos = (f @ w.T) / np.linalg.norm(f, axis=1)[:, None] / np.linalg.norm(w, axis=1)[None, :]
    return cos.max(axis=1)


def test_closed_forms(id_test, ood_test):
    for acts in (id_test, ood_test):
        cos = _max_cosine(acts.features, acts.head_weight)
        norm = np.sqrt((acts.features.astype(np.float64) ** 2).sum(axis=1))
        # float64 both: cosines from 32-term dot products (within ~4e-15 absolute) of at least
        # 0.1 here, norms and their sum from non-negative sums (~4e-15 relative)
        np.testing.assert_allclose(create("maxcosine").score(acts), cos, rtol=1e-12)
        np.testing.assert_allclose(create("maxnorm").score(acts), norm, rtol=1e-12)
        np.testing.assert_allclose(create("dml", lam=0.3).score(acts), cos + 0.3 * norm, rtol=1e-12)


def test_hand_computed(make_acts):
    acts = make_acts(2, 2, 2)
    acts.features[:] = [[3.0, 4.0], [0.0, 2.0]]
    acts.head_weight[:] = [[1.0, 0.0], [1.0, 1.0]]
    # small integers, square roots and divisions: a few ulps, inside the default rtol 1e-7
    np.testing.assert_allclose(create("maxcosine").score(acts), [7 / 5 / np.sqrt(2), 1 / np.sqrt(2)])
    np.testing.assert_allclose(create("maxnorm").score(acts), [5.0, 2.0])


def test_maxlogit_decouples(make_acts):
    """Bias-free head with equal-norm rows: MaxLogit = ||w|| * MaxNorm * MaxCosine."""
    acts = make_acts(40, 5, 16)
    acts.head_weight[:] = acts.head_weight / np.linalg.norm(acts.head_weight, axis=1, keepdims=True) * 2
    acts.head_bias[:] = 0
    acts.logits[:] = acts.features @ acts.head_weight.T
    product = 2 * create("maxnorm").score(acts) * create("maxcosine").score(acts)
    # the logits are a float32 product of 16 terms (~1e-6 relative at worst), the rest float64
    np.testing.assert_allclose(create("maxlogit").score(acts), product, rtol=1e-5)


def test_scaling_invariance_of_cosine(id_test):
    scaled = id_test.subset(np.arange(len(id_test)))
    scaled.features = scaled.features * np.linspace(0.1, 10, len(scaled))[:, None].astype(np.float32)
    # the scaled features are rounded to float32 (u = 6e-8 relative each): cosines move by ~1e-7
    np.testing.assert_allclose(create("maxcosine").score(scaled), create("maxcosine").score(id_test), rtol=1e-6)


def test_missing_inputs(make_acts):
    no_head = make_acts(5, 3, 4, with_head=False)
    with pytest.raises(MissingActivationError, match="head_weight"):
        create("dml").score(no_head)
    no_features = make_acts(5, 3, 4)
    no_features.features = None
    with pytest.raises(MissingActivationError, match="features"):
        create("maxnorm").score(no_features)
