import numpy as np

from oodbench.detectors import create
from tests.detectors._reference import assert_rel, pod, tensor


def test_matches_pytorch_ood(id_test, ood_test):
    for acts in (id_test, ood_test):
        ours = create("maxlogit").score(acts)
        # a maximum selects a stored float32 value: exact on any CPU (1e-12 only formats)
        assert_rel(ours, -pod().MaxLogit.score(tensor(acts.logits)), rtol=1e-12)


def test_hand_computed(make_acts):
    acts = make_acts(3, 4, 5)
    acts.logits[:] = np.array([[1.0, -2.0, 3.5, 0.0], [-1.0, -0.5, -3.0, -0.7], [2.0, 2.0, 1.0, 0.0]])
    np.testing.assert_array_equal(create("maxlogit").score(acts), [3.5, -0.5, 2.0])  # a selection: exact
