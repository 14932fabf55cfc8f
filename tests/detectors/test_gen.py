import numpy as np
import pytest
import scipy.special

from oodbench.detectors import create
from tests._tolerance import assert_within
from tests.detectors._reference import gen_error, pod, tensor


def _closed_form(logits: np.ndarray, gamma: float, m: int) -> np.ndarray:
    p = scipy.special.softmax(logits.astype(np.float64), axis=1)
    top = -np.sort(-p, axis=1)[:, :m]
    return -np.sum(top**gamma * (1 - top) ** gamma, axis=1)


@pytest.mark.parametrize("gamma,m", [(0.1, 100), (0.1, 4), (0.5, 10), (2.0, 1)])
def test_matches_pytorch_ood_times_min_m_c(id_test, ood_test, gamma, m):
    """pytorch-ood averages over the top-M terms, the paper sums: a factor min(M, C)."""
    for acts in (id_test, ood_test):
        p = scipy.special.softmax(acts.logits.astype(np.float64), axis=1)
        assert p.min() > 1e-7 and p.max() < 1 - 1e-7  # pytorch-ood's clamp is inactive
        ours = create("gen", gamma=gamma, M=m).score(acts)
        ref = pod().GEN.score(tensor(acts.logits), gamma=gamma, M=m)
        # float32 exps and logs of float32 logits (oodbench.compute) against float64
        bound = gen_error(acts.logits, gamma)
        assert_within(ours, -min(m, acts.num_classes) * ref.numpy(), bound)
        assert_within(ours, _closed_form(acts.logits, gamma, m), bound)


def test_defaults_are_the_papers():
    det = create("gen")
    assert (det.gamma, det.M) == (0.1, 100)


def test_exact_for_near_one_probabilities(make_acts):
    acts = make_acts(3, 5, 4)
    acts.logits[:] = np.array([[30.0, 0, 0, 0, 0], [10.0, 9.0, 0, -5, 0], [0.0, 0, 0, 0, 0]])
    log_p = scipy.special.log_softmax(acts.logits.astype(np.float64), axis=1)
    p = np.exp(log_p)
    # 1 - p computed as the sum of the other probabilities: exact even when p ~ 1 - 4e-13
    one_minus = np.array([[np.delete(row, j).sum() for j in range(5)] for row in p])
    expected = -np.sum(p**0.1 * one_minus**0.1, axis=1)
    # float32 exps and logs (oodbench.compute); then the all-float64 path of float64 logits
    assert_within(create("gen").score(acts), expected, gen_error(acts.logits, 0.1))
    acts.logits = acts.logits.astype(np.float64)
    assert_within(create("gen").score(acts), expected, gen_error(acts.logits, 0.1))
