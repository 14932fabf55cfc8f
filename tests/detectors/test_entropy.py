import numpy as np
import scipy.special
import scipy.stats

from oodbench.detectors import create
from tests.detectors._reference import assert_rel, pod, tensor


def test_matches_pytorch_ood_when_no_probability_is_clipped(id_test, ood_test):
    for acts in (id_test, ood_test):
        assert scipy.special.softmax(acts.logits.astype(np.float64), axis=1).min() > 1e-7
        ours = create("entropy").score(acts)
        assert_rel(ours, -pod().Entropy.score(tensor(acts.logits)), rtol=1e-5)


def test_exact_where_pytorch_ood_clips(make_acts):
    """Very confident logits: p < 1e-7 for most classes; ours is the exact -H, pytorch-ood's not."""
    acts = make_acts(50, 10, 8)
    acts.logits[:] = acts.logits * 20
    p = scipy.special.softmax(acts.logits.astype(np.float64), axis=1)
    assert p.min() < 1e-7
    exact = -scipy.stats.entropy(p, axis=1)
    ours = create("entropy").score(acts)
    np.testing.assert_allclose(ours, exact, rtol=1e-6, atol=1e-15)  # float32 exps
    clipped = -pod().Entropy.score(tensor(acts.logits)).numpy()
    assert np.abs(clipped - exact).max() > 1e-7  # the documented difference is real


def test_uniform_logits_give_minus_log_c(make_acts):
    acts = make_acts(4, 7, 3)
    acts.logits[:] = 2.5
    np.testing.assert_allclose(create("entropy").score(acts), -np.log(7), rtol=1e-7)
