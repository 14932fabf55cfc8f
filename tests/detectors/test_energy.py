import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import InvalidInputError
from tests._tolerance import U32, assert_within
from tests.detectors._reference import energy_error, pod, tensor


@pytest.mark.parametrize("temperature", [1.0, 2.5, 1000.0])
def test_matches_pytorch_ood(id_test, ood_test, temperature):
    for acts in (id_test, ood_test):
        ours = create("energy", temperature=temperature).score(acts)
        ref = pod().EnergyBased.score(tensor(acts.logits), t=temperature).numpy()
        # float32 exps, float64 log (oodbench.compute): ~1e-7 * T absolute at T = 1000 (2e-7
        # of -E ~ T log C), so a relative tolerance of 1e-7 is not enough there
        assert_within(ours, -ref, energy_error(acts.logits, temperature))


def test_hand_computed_and_stable_for_huge_logits(make_acts):
    acts = make_acts(2, 3, 4)
    acts.logits[:] = np.array([[0.0, np.log(2.0), np.log(5.0)], [1000.0, 1000.0, -1000.0]])
    row = acts.logits[0].astype(np.float64)  # the float32-rounded log 2 and log 5
    scores = create("energy", temperature=1.0).score(acts)
    bound = energy_error(acts.logits)  # float32 exps (oodbench.compute)
    assert_within(scores, [np.log(np.exp(row).sum()), 1000.0 + np.log(2.0)], bound)
    # max z + log S with S = 2 exactly: 1000 + log 2 rounds to the same float64 for log 2 off
    # by an ulp or two (the ulp of 1000 is 500 times that of log 2), so any CPU's log gives it
    assert scores[1] == 1000.0 + np.log(2.0)
    # against log 8: also the float32 rounding of log 2 and log 5 in the logits (u |z| each)
    assert_within(scores[:1], [np.log(8.0)], bound[0] + U32 * (np.log(2.0) + np.log(5.0)))
    half = create("energy", temperature=0.5).score(acts)[0]
    assert_within([half], [0.5 * np.log(np.exp(2 * row).sum())], energy_error(acts.logits[:1], 0.5))
    acts.logits = acts.logits.astype(np.float64)  # float64 logits: all-float64 maths
    assert_within(create("energy").score(acts)[:1], [np.log(np.exp(row).sum())],
                  energy_error(acts.logits[:1]))


def test_rejects_non_positive_temperature():
    with pytest.raises(InvalidInputError, match="temperature"):
        create("energy", temperature=0.0)
