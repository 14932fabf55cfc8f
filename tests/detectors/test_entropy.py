import numpy as np
import scipy.special
import scipy.stats

from oodbench.detectors import create
from tests._tolerance import assert_within
from tests.detectors._reference import entropy_error, pod, tensor


def test_matches_pytorch_ood_when_no_probability_is_clipped(id_test, ood_test):
    for acts in (id_test, ood_test):
        assert scipy.special.softmax(acts.logits.astype(np.float64), axis=1).min() > 1e-7
        ours = create("entropy").score(acts)
        # float32 exps and sums (oodbench.compute) against pytorch-ood's float64
        assert_within(ours, -pod().Entropy.score(tensor(acts.logits)).numpy(), entropy_error(acts.logits))


def test_exact_where_pytorch_ood_clips(make_acts):
    """Very confident logits: p < 1e-7 for most classes; ours is the exact -H, pytorch-ood's not."""
    acts = make_acts(50, 10, 8)
    acts.logits[:] = acts.logits * 20
    z = acts.logits.astype(np.float64)
    p = scipy.special.softmax(z, axis=1)
    assert p.min() < 1e-7
    # scipy's entropy drops the top class's term p log p = -log1p(s) / (1 + s) (s the other
    # classes' mass) where 1 / (1 + s) rounds to 1 (s < 1e-16, here down to 1e-19, a few % of
    # -H there): the exact -H keeps it
    top = np.argmax(z, axis=1)
    others = np.arange(z.shape[1]) != top[:, None]
    s = np.where(others, np.exp(z - z.max(axis=1, keepdims=True)), 0.0).sum(axis=1)
    log_p = scipy.special.log_softmax(z, axis=1)
    exact = np.where(others, p * log_p, 0.0).sum(axis=1) - np.log1p(s) / (1.0 + s)
    ours = create("entropy").score(acts)
    # float32 exps and sums (oodbench.compute): terms with exponents down to -400 weigh little
    assert_within(ours, exact, entropy_error(acts.logits))
    clipped = -pod().Entropy.score(tensor(acts.logits)).numpy()
    assert np.abs(clipped - exact).max() > 1e-7  # the documented difference is real


def test_uniform_logits_give_minus_log_c(make_acts):
    acts = make_acts(4, 7, 3)
    acts.logits[:] = 2.5
    # exps of 0 and a sum of six 1s are exact: log1p(6) against log(7), an ulp or two apart
    assert_within(create("entropy").score(acts), np.full(4, -np.log(7)), entropy_error(acts.logits))
