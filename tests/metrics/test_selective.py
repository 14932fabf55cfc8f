"""Accuracy, id-AUROC and AURC against scikit-learn, a direct loop and exact tie averages."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

from oodbench.errors import EmptyInputError, InvalidInputError
from oodbench.metrics import accuracy, aurc, id_auroc


def aurc_loop(conf, correct) -> float:
    """The definition as a loop (C-OOD's AURC_calc): sort by confidence, highest first; mean over
    k of (errors among the first k) / k. Ties keep the order given (stable sort)."""
    order = sorted(range(len(conf)), key=lambda i: -conf[i])
    errors, total = 0, Fraction(0)
    for k, i in enumerate(order, start=1):
        errors += not correct[i]
        total += Fraction(errors, k)
    return total / len(conf)


def aurc_over_all_tie_orders(conf, correct) -> Fraction:
    """The mean of :func:`aurc_loop` over every order of the input (so every order of ties)."""
    runs = [
        aurc_loop([conf[i] for i in p], [correct[i] for i in p])
        for p in itertools.permutations(range(len(conf)))
    ]
    return sum(runs, Fraction(0)) / len(runs)


def test_accuracy_matches_sklearn():
    rng = np.random.default_rng(20)
    for n in (1, 7, 1000):
        pred, labels = rng.integers(0, 5, n), rng.integers(0, 5, n)
        assert accuracy(pred, labels) == skm.accuracy_score(labels, pred)
    assert accuracy(torch.tensor([1, 2, 3]), [1, 2, 0]) == 2 / 3


def test_accuracy_refuses_logits_ood_labels_and_mismatches():
    with pytest.raises(InvalidInputError, match="argmax"):
        accuracy(np.array([0.2, 0.8]), [1, 0])
    with pytest.raises(InvalidInputError, match="1-D"):
        accuracy(np.zeros((4, 3), dtype=int), [1, 0, 0, 0])
    with pytest.raises(InvalidInputError, match="negative"):
        accuracy([1, 0], [1, -1])
    with pytest.raises(InvalidInputError, match="lengths 2 and 3"):
        accuracy([1, 0], [1, 0, 0])
    with pytest.raises(EmptyInputError):
        accuracy([], [])


@pytest.mark.parametrize("seed", range(3))
def test_id_auroc_matches_sklearn(seed):
    rng = np.random.default_rng(30 + seed)
    for _ in range(100):
        n = int(rng.integers(2, 3000))
        conf = rng.normal(size=n) if rng.random() < 0.5 else rng.integers(0, 4, n).astype(float)
        correct = rng.random(n) < 1 / (1 + np.exp(-conf))
        correct[:2] = [True, False]
        assert abs(id_auroc(conf, correct) - skm.roc_auc_score(correct, conf)) <= 1e-12


def test_id_auroc_undefined_without_both_outcomes():
    with pytest.raises(EmptyInputError, match="all 3 are correct"):
        id_auroc([0.1, 0.5, 0.9], [True, True, True])
    with pytest.raises(EmptyInputError, match="all 2 are wrong"):
        id_auroc([0.1, 0.5], [0, 0])


@pytest.mark.parametrize("seed", range(3))
def test_aurc_matches_the_loop_for_distinct_confidences(seed):
    rng = np.random.default_rng(40 + seed)
    for _ in range(30):
        n = int(rng.integers(1, 400))
        conf = rng.normal(size=n)
        correct = rng.random(n) < rng.uniform(0, 1)
        assert abs(aurc(conf, correct) - float(aurc_loop(conf.tolist(), correct.tolist()))) <= 1e-12


def test_aurc_with_ties_is_the_mean_over_all_tie_orders():
    rng = np.random.default_rng(50)
    for _ in range(12):
        n = int(rng.integers(1, 7))
        conf = rng.integers(0, 3, n).tolist()
        correct = (rng.random(n) < 0.6).tolist()
        exact = aurc_over_all_tie_orders(conf, correct)
        assert abs(Fraction(aurc(conf, correct)) - exact) <= Fraction(1, 10**14)


def test_aurc_with_ties_does_not_depend_on_input_order():
    rng = np.random.default_rng(51)
    conf = rng.integers(0, 4, 500).astype(float)
    correct = rng.random(500) < 0.7
    want = aurc(conf, correct)
    for _ in range(5):
        perm = rng.permutation(500)
        assert aurc(conf[perm], correct[perm]) == want


def test_aurc_closed_forms():
    assert aurc([0.9, 0.5, 0.1], [True, True, True]) == 0.0
    assert aurc([0.9, 0.5], [False, False]) == 1.0
    # one error ranked last of 2: risks 0, 1/2 -> 1/4; ranked first: 1, 1/2 -> 3/4
    assert aurc([2.0, 1.0], [1, 0]) == 0.25
    assert aurc([2.0, 1.0], [0, 1]) == 0.75
    # tied: expected risks 1/2, 1/2 -> 1/2
    assert aurc([1.0, 1.0], [0, 1]) == 0.5


def test_inputs_are_validated():
    with pytest.raises(InvalidInputError, match="booleans"):
        aurc([0.1, 0.2], [0, 2])
    with pytest.raises(InvalidInputError, match="lengths 2 and 1"):
        id_auroc([0.1, 0.2], [True])
    conf = torch.tensor([0.9, 0.2, 0.6], dtype=torch.bfloat16)
    assert aurc(conf, torch.tensor([True, False, True])) == aurc(conf.double().numpy(), [1, 0, 1])
