"""evaluate(): stable keys, the same numbers as the single metrics and as scikit-learn."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oodbench.errors import InvalidInputError, NonFiniteError
from oodbench.metrics import (
    accuracy,
    aupr_in,
    aupr_out,
    aurc,
    auroc,
    average_precision_in,
    average_precision_out,
    evaluate,
    fpr_at_tpr,
    id_auroc,
)
from oodbench.metrics.evaluate import fpr_key
from tests.metrics._reference import random_case, sklearn_metrics

OOD_KEYS = ["auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out", "ap_in", "ap_out"]


def test_keys_and_values_equal_the_single_metrics():
    rng = np.random.default_rng(60)
    for _ in range(30):
        id_scores, ood_scores = random_case(rng)
        got = evaluate(id_scores, ood_scores)
        assert list(got) == OOD_KEYS
        assert got == {
            "auroc": auroc(id_scores, ood_scores),
            "fpr95_id": fpr_at_tpr(id_scores, ood_scores),
            "fpr95_ood": fpr_at_tpr(id_scores, ood_scores, positive="ood"),
            "aupr_in": aupr_in(id_scores, ood_scores),
            "aupr_out": aupr_out(id_scores, ood_scores),
            "ap_in": average_precision_in(id_scores, ood_scores),
            "ap_out": average_precision_out(id_scores, ood_scores),
        }
        want = sklearn_metrics(id_scores, ood_scores)
        assert got["fpr95_id"] == want["fpr_id"] and got["fpr95_ood"] == want["fpr_ood"]
        assert abs(got["auroc"] - want["auroc"]) <= 1e-12


def test_id_metrics_with_id_correct():
    rng = np.random.default_rng(61)
    pred, labels = rng.integers(0, 3, 400), rng.integers(0, 3, 400)
    conf = rng.normal(size=400) + (pred == labels)
    got = evaluate(conf, rng.normal(size=300), id_correct=pred == labels)
    assert list(got) == [*OOD_KEYS, "id_accuracy", "id_auroc", "aurc"]
    assert got["id_accuracy"] == accuracy(pred, labels)
    assert got["id_auroc"] == id_auroc(conf, pred == labels)
    assert got["aurc"] == aurc(conf, pred == labels)


def test_id_auroc_is_nan_when_undefined():
    got = evaluate([0.9, 0.8], [0.1], id_correct=[True, True])
    assert got["id_accuracy"] == 1.0 and got["aurc"] == 0.0 and math.isnan(got["id_auroc"])


@pytest.mark.parametrize(
    "tpr, stem", [(0.95, "fpr95"), (0.9, "fpr90"), (0.995, "fpr99.5"), (0.8, "fpr80")]
)
def test_tpr_names_the_fpr_keys(tpr, stem):
    assert fpr_key(tpr) == stem
    rng = np.random.default_rng(62)
    id_scores, ood_scores = rng.normal(1, 1, 200), rng.normal(0, 1, 200)
    got = evaluate(id_scores, ood_scores, tpr=tpr)
    assert got[f"{stem}_id"] == fpr_at_tpr(id_scores, ood_scores, tpr=tpr)
    assert got[f"{stem}_ood"] == fpr_at_tpr(id_scores, ood_scores, tpr=tpr, positive="ood")


def test_errors_name_the_argument():
    with pytest.raises(InvalidInputError, match="id_scores and id_correct"):
        evaluate([0.1, 0.2], [0.3], id_correct=[True])
    with pytest.raises(NonFiniteError, match="ood_scores contains 1 NaN"):
        evaluate([0.1], [float("nan")])
    with pytest.raises(InvalidInputError, match="tpr"):
        evaluate([0.1], [0.2], tpr=95)
