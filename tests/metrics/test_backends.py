"""The metrics sort on the torch path's device (``torch.sort``) and give the NumPy path's numbers
exactly: the counts behind every curve are the same integers."""

from __future__ import annotations

import numpy as np

from oodbench import compute
from oodbench.metrics import evaluate
from oodbench.metrics.ranking import Ranking
from tests._fake_device import fake_device
from tests.metrics._reference import random_case


def test_torch_sort_gives_the_numpy_ranking_and_metrics():
    rng = np.random.default_rng(7)
    with fake_device() as device:
        for _ in range(40):  # ties, fp16 rounding, +-inf, extreme magnitudes, separated sets
            id_scores, ood_scores = random_case(rng)
            correct = rng.random(id_scores.size) < 0.7
            with compute.use("numpy"):
                reference = Ranking.from_scores(id_scores, ood_scores)
                expected = evaluate(id_scores, ood_scores, id_correct=correct)
            with compute.use("torch", device):
                ranking = Ranking.from_scores(id_scores, ood_scores)
                got = evaluate(id_scores, ood_scores, id_correct=correct)
            np.testing.assert_array_equal(ranking.values, reference.values)
            np.testing.assert_array_equal(ranking.pos, reference.pos)
            np.testing.assert_array_equal(ranking.neg, reference.neg)
            assert got.keys() == expected.keys()
            for key in expected:
                assert got[key] == expected[key] or (np.isnan(got[key]) and np.isnan(expected[key]))
