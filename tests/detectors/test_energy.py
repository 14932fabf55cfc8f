import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests.detectors._reference import assert_rel, pod, tensor


@pytest.mark.parametrize("temperature", [1.0, 2.5, 1000.0])
def test_matches_pytorch_ood(id_test, ood_test, temperature):
    for acts in (id_test, ood_test):
        ours = create("energy", temperature=temperature).score(acts)
        ref = pod().EnergyBased.score(tensor(acts.logits), t=temperature)
        assert_rel(ours, -ref, rtol=1e-7)  # float32 exps, float64 log1p (oodbench.compute)


def test_hand_computed_and_stable_for_huge_logits(make_acts):
    acts = make_acts(2, 3, 4)
    acts.logits[:] = np.array([[0.0, np.log(2.0), np.log(5.0)], [1000.0, 1000.0, -1000.0]])
    row = acts.logits[0].astype(np.float64)  # the float32-rounded log 2 and log 5
    scores = create("energy", temperature=1.0).score(acts)
    np.testing.assert_allclose(scores, [np.log(np.exp(row).sum()), 1000.0 + np.log(2.0)], rtol=1e-7)
    assert scores[1] == 1000.0 + np.log(2.0)  # max z + log1p(s) with s = 1 exactly
    np.testing.assert_allclose(scores[0], np.log(8.0), rtol=1e-7)
    half = create("energy", temperature=0.5).score(acts)[0]
    np.testing.assert_allclose(half, 0.5 * np.log(np.exp(2 * row).sum()), rtol=1e-7)
    acts.logits = acts.logits.astype(np.float64)  # float64 logits: all-float64 maths
    np.testing.assert_allclose(create("energy").score(acts)[0], np.log(np.exp(row).sum()), rtol=1e-15)


def test_rejects_non_positive_temperature():
    with pytest.raises(InvalidInputError, match="temperature"):
        create("energy", temperature=0.0)
