"""The ranking kernel: whole curves against scikit-learn, counts against their definition.

Curves compared bit for bit are portable: both sides sort the same scores, count (cumulative
sums of 0/1 weights are exact integers) and divide the same counts once, each division
correctly rounded on any CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm

from oodbench.metrics.ranking import Ranking
from tests.metrics._reference import random_case


def finite_case(rng):
    while True:
        pos, neg = random_case(rng)
        if np.isfinite(pos).all() and np.isfinite(neg).all():
            return pos, neg


@pytest.mark.parametrize("seed", range(3))
def test_roc_and_pr_curves_equal_sklearn_point_for_point(seed):
    rng = np.random.default_rng(300 + seed)
    for _ in range(60):
        pos, neg = finite_case(rng)
        y, s = np.r_[np.ones(pos.size), np.zeros(neg.size)], np.r_[pos, neg]
        ranking = Ranking.from_scores(pos, neg)
        for got, want in zip(ranking.roc_curve(), skm.roc_curve(y, s, drop_intermediate=False)):
            np.testing.assert_array_equal(got, want)
        for got, want in zip(ranking.precision_recall_curve(), skm.precision_recall_curve(y, s)):
            np.testing.assert_array_equal(got, want)


def test_counts_follow_the_definition():
    rng = np.random.default_rng(11)
    pos = rng.integers(0, 6, 50).astype(float)
    neg = rng.integers(3, 9, 40).astype(float)
    ranking = Ranking.from_scores(pos, neg)
    np.testing.assert_array_equal(ranking.values, np.unique(np.r_[pos, neg]))
    for value, n_pos, n_neg in zip(ranking.values, ranking.pos, ranking.neg):
        assert n_pos == np.sum(pos == value) and n_neg == np.sum(neg == value)
    tps, fps = ranking.cumulative()
    for t, tp, fp in zip(ranking.values[::-1], tps, fps):
        assert tp == np.sum(pos >= t) and fp == np.sum(neg >= t)
    assert (ranking.n_pos, ranking.n_neg) == (50, 40)


def test_flipped_is_the_ranking_of_negated_scores_with_roles_swapped():
    rng = np.random.default_rng(12)
    pos, neg = rng.integers(0, 7, 30) * 0.5, rng.integers(2, 9, 25) * 0.5
    flipped = Ranking.from_scores(pos, neg).flipped()
    direct = Ranking.from_scores(-neg, -pos)
    for name in ("values", "pos", "neg"):
        np.testing.assert_array_equal(getattr(flipped, name), getattr(direct, name))


def test_signed_zeros_and_infinities_group_as_equal_values():
    ranking = Ranking.from_scores(
        np.array([0.0, np.inf, -np.inf, 5e-324]), np.array([-0.0, np.inf, np.inf, 1e300])
    )
    assert ranking.values.size == 5  # -inf, 0, 5e-324, 1e300, inf
    np.testing.assert_array_equal(ranking.pos, [1, 1, 1, 0, 1])
    np.testing.assert_array_equal(ranking.neg, [0, 1, 0, 1, 2])


def test_one_side_may_be_empty():
    ranking = Ranking.from_scores(np.array([2.0, 1.0, 2.0]), np.array([]))
    np.testing.assert_array_equal(ranking.values, [1.0, 2.0])
    np.testing.assert_array_equal(ranking.pos, [1, 2])
    np.testing.assert_array_equal(ranking.neg, [0, 0])
