import numpy as np
import scipy.special

from oodbench.detectors import create
from tests._tolerance import assert_within
from tests.detectors._reference import msp_error, pod, tensor


def test_matches_scipy_and_pytorch_ood(id_test, ood_test):
    for acts in (id_test, ood_test):
        ours = create("msp").score(acts)
        exact = scipy.special.softmax(acts.logits.astype(np.float64), axis=1).max(axis=1)
        bound = msp_error(acts.logits)  # float32 exps (oodbench.compute), float64 references
        assert_within(ours, exact, bound)
        assert_within(ours, -pod().MaxSoftmax.score(tensor(acts.logits)).numpy(), bound)


def test_confident_predictions_keep_distinct_scores_below_one(make_acts):
    """1 / (1 + s) with s the other classes' mass: margins of 15-25 give s of 3e-7 to 1e-11,
    distinct float64 scores below 1 (a float32 softmax rounds them all to 1.0)."""
    acts = make_acts(40, 10, 8)
    others = np.delete(acts.logits, 3, axis=1)
    acts.logits[:, 3] = others.max(axis=1) + np.linspace(15, 25, 40, dtype=np.float32)
    z = acts.logits.astype(np.float64)
    mass = np.exp(np.delete(z, 3, axis=1) - z[:, 3:4]).sum(axis=1)  # s, exactly as defined
    ours = create("msp").score(acts)
    assert len(np.unique(ours)) == 40 and (ours < 1.0).all()
    # 1/ours - 1 recovers s: to 2e-16 absolute (2e-5 relative for the smallest s, 1e-11), and
    # the float32 exps of exponents -15 to -25 to (2 ULPS + 3 |q|) u < 5e-6 relative
    np.testing.assert_allclose(1.0 / ours - 1.0, mass, rtol=1e-4)
