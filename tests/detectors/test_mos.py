import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import ClassCountMismatchError, InvalidInputError

GROUPS = [[0, 2], [1]]  # blocks: [others, 0, 2], [others, 1] -> 5 outputs


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_minus_the_smallest_others_probability(make_acts):
    acts = make_acts(20, 5, 4)
    expected = [-min(softmax(row[0:3])[0], softmax(row[3:5])[0]) for row in acts.logits.astype(float)]
    # float64 softmaxes of 2 and 3 logits of size < 5: a few ulps apart on any CPU
    np.testing.assert_allclose(create("mos", groups=GROUPS).score(acts), expected, rtol=1e-12)


def test_hand_computed_and_extreme(make_acts):
    acts = make_acts(2, 5, 4)
    acts.logits[:] = [[0.0, 0.0, 0.0, 0.0, 0.0], [-1e4, 1e4, 0.0, 1e4, -1e4]]
    scores = create("mos", groups=GROUPS).score(acts)
    # row 0: others probability 1/3 in group 1 and 1/2 in group 2 -> -1/3
    # exps of 0 and of -1e4 (0 exactly): -1/3 to an ulp, and 0
    np.testing.assert_allclose(scores, [-1.0 / 3.0, -0.0], atol=1e-12)


def test_groups_from_the_activations_meta(make_acts):
    acts = make_acts(4, 5, 4)
    acts.meta["mos_groups"] = GROUPS
    # the same groups through the same code in this process: the same bits
    np.testing.assert_array_equal(create("mos").score(acts), create("mos", groups=GROUPS).score(acts))


def test_needs_groups_and_a_matching_head(make_acts):
    with pytest.raises(InvalidInputError, match="class groups"):
        create("mos").score(make_acts(3, 5, 4))
    with pytest.raises(ClassCountMismatchError, match="needs a head of 5 outputs"):
        create("mos", groups=GROUPS).score(make_acts(3, 4, 4))
