"""oodbench.tune: the OpenOOD protocol on cached activations, refitting, the OOD-free mode.

The references are recomputed in this process by the same detectors (or network) on the same
rows, so they equal the tuned values to the last bit here, and on any CPU, where both sides
change alike; tolerances of 1e-12 relative (1e-9 for means over variants) only leave room for
the summation order of averages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

import oodbench
from oodbench import metrics
from oodbench.detectors import Detector, create
from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tuning import TuneResult
from tests.detectors.conftest import make_activations


@pytest.fixture(scope="module")
def data():
    train = make_activations(500, 10, 32, seed=0)
    id_val = make_activations(200, 10, 32, seed=1)
    ood_val = make_activations(200, 10, 32, seed=2, ood=True)
    ood_val.features[:, :3] *= 8.0  # over-activated OOD: the clipping percentile matters
    ood_val.logits[:] = ood_val.features @ ood_val.head_weight.T + ood_val.head_bias
    return train, id_val, ood_val


def test_openood_protocol_refits_every_point(data):
    train, id_val, ood_val = data
    grid = {"percentile": [60.0, 80.0, 95.0, 99.9]}
    result = oodbench.tune("react", grid, id_val, ood_val, fit=train)
    assert isinstance(result, TuneResult) and result.criterion == "auroc"
    expected = []
    for p in grid["percentile"]:  # independently: fit each point and score
        det = create("react", percentile=p).fit(train)
        expected.append(metrics.auroc(det.score(id_val), det.score(ood_val)))
    np.testing.assert_allclose(result.table["auroc"], expected, rtol=1e-12)
    assert result.table["refit"].all()
    winner = int(np.argmax(expected))
    assert result.best_params == {"percentile": grid["percentile"][winner]}
    assert result.best_value == pytest.approx(expected[winner])
    assert result.table["best"].tolist() == [i == winner for i in range(4)]
    # the returned detector carries the winner's own statistics, not the first point's
    assert result.detector.threshold_ == pytest.approx(
        np.percentile(train.features.astype(np.float64), grid["percentile"][winner]))
    assert len(set(result.table["auroc"])) == 4  # the percentile really changed the scores
    for key in ("fpr95_id", "fpr95_ood", "aupr_in", "id_auroc", "aurc"):
        assert key in result.table


def test_lower_is_better_criterion_and_instance_base(data):
    train, id_val, ood_val = data
    base = create("dice", react_percentile=90.0)
    result = oodbench.tune(base, {"sparsity": [0.0, 50.0, 90.0]}, id_val, ood_val, fit=train,
                           criterion="fpr95_ood")
    fprs = result.table["fpr95_ood"].to_numpy()
    assert result.best_params == {"sparsity": [0.0, 50.0, 90.0][int(np.argmin(fprs))]}
    assert result.detector.hyperparams["react_percentile"] == 90.0  # the base is kept


@dataclass
class _Counting(Detector):
    """A test detector: fit learns the feature mean; scale only changes scoring."""

    shift: float = 0.0
    scale: float = 1.0

    name = "counting"
    requires = frozenset({"features", "train"})
    score_only_hyperparams: ClassVar[frozenset[str]] = frozenset({"scale"})
    fits: ClassVar[list[float]] = []

    def _fit(self, train: Activations | None, model: Any) -> None:
        _Counting.fits.append(self.shift)
        self.mean_ = train.features.mean() + self.shift

    def _score(self, acts: Activations) -> np.ndarray:
        return -self.scale * np.abs(acts.features.mean(axis=1) - self.mean_)


def test_score_only_hyperparameters_share_one_fit(data):
    train, id_val, ood_val = data
    _Counting.fits.clear()
    grid = {"scale": [1.0, 2.0, -1.0], "shift": [0.0, 5.0]}
    result = oodbench.tune(_Counting(), grid, id_val, ood_val, fit=train)
    assert sorted(_Counting.fits) == [0.0, 5.0]  # two fits for six grid points
    assert result.table["refit"].sum() == 2
    for _, row in result.table.iterrows():  # each point scored with its own scale and shift
        det = _Counting(shift=row["shift"], scale=row["scale"]).fit(train)
        assert row["auroc"] == pytest.approx(metrics.auroc(det.score(id_val), det.score(ood_val)))
    table = result.table.set_index(["shift", "scale"])["auroc"]
    for shift in (0.0, 5.0):  # a negative scale flips the ranking: the copies got their scale
        assert table[(shift, -1.0)] == pytest.approx(1.0 - table[(shift, 1.0)])
    assert result.best_value == result.table["auroc"].max()


def test_ood_free_mode(data):
    train, id_val, _ = data
    grid = {"percentile": [50.0, 90.0, 99.0]}
    result = oodbench.tune("react", grid, id_val, None, fit=train)
    assert result.criterion == "id_auroc"
    expected = [metrics.id_auroc(create("react", percentile=p).fit(train).score(id_val),
                                 id_val.correct) for p in grid["percentile"]]
    np.testing.assert_allclose(result.table["id_auroc"], expected, rtol=1e-12)
    assert result.best_params["percentile"] == grid["percentile"][int(np.argmax(expected))]
    assert "auroc" not in result.table
    aurc = oodbench.tune("react", grid, id_val, None, fit=train, criterion="aurc")
    assert aurc.best_value == aurc.table["aurc"].min()


def test_ties_go_to_the_first_point(data):
    _, id_val, ood_val = data
    result = oodbench.tune("ash_p", {"percentile": [60.0, 60.0]}, id_val, ood_val)
    assert result.table["best"].tolist() == [True, False]


def test_errors(data):
    train, id_val, ood_val = data
    with pytest.raises(InvalidInputError, match="needs ood_val"):
        oodbench.tune("react", {"percentile": [90.0]}, id_val, None, fit=train, criterion="auroc")
    with pytest.raises(InvalidInputError, match="non-empty list"):
        oodbench.tune("react", {"percentile": []}, id_val, ood_val, fit=train)
    with pytest.raises(InvalidInputError, match="no hyper-parameter"):
        oodbench.tune("react", {"k": [1]}, id_val, ood_val, fit=train)
    with pytest.raises(InvalidInputError, match="no hyper-parameter"):
        oodbench.tune(create("react"), {"k": [1]}, id_val, ood_val, fit=train)
    with pytest.raises(InvalidInputError, match="percentile"):
        oodbench.tune("react", {"percentile": [90.0, 150.0]}, id_val, ood_val, fit=train)
    perfect = id_val.subset(np.flatnonzero(id_val.correct))
    with pytest.raises(InvalidInputError, match="gets all"):
        oodbench.tune("react", {"percentile": [90.0]}, perfect, None, fit=train)


def test_knn_k_grid_builds_the_bank_once(data, monkeypatch):
    """k only changes scoring (declared in KNN.score_only_hyperparams): one fit for the grid."""
    from oodbench.detectors.knn import KNN

    fits = []
    original = KNN._fit
    monkeypatch.setattr(KNN, "_fit", lambda self, train, model: (fits.append(self.k), original(self, train, model)))
    train, id_val, ood_val = data
    result = oodbench.tune("knn", {"k": [1, 5, 20, 50]}, id_val, ood_val, fit=train)
    assert fits == [1]
    assert result.table["refit"].tolist() == [True, False, False, False]
    for k, auroc in zip([1, 5, 20, 50], result.table["auroc"]):  # each k scored as a fresh fit would
        det = create("knn", k=k).fit(train)
        assert auroc == pytest.approx(metrics.auroc(det.score(id_val), det.score(ood_val)), abs=1e-12)
    fits.clear()
    oodbench.tune("knn", {"k": [1, 5], "fit_fraction": [0.5, 1.0]}, id_val, ood_val, fit=train)
    assert len(fits) == 2  # one bank per fit_fraction


def test_openood_grid_fits_on_id_val_in_openoods_order(data):
    train, id_val, ood_val = data
    result = oodbench.tune("react", "openood", id_val, ood_val, fit=train)
    assert result.table["percentile"].tolist() == [85.0, 90.0, 95.0, 99.0]  # react.yml's list
    best = result.best_params["percentile"]
    # OpenOOD fits ReAct's threshold on ID-val (react_postprocessor.py setup: id_loader_dict['val'])
    assert result.detector.threshold_ == pytest.approx(np.percentile(id_val.features.astype(np.float64), best))
    assert result.detector.protocol in ("openood", "openood (modified: percentile)")
    record = json.loads(result.detector.tuning)
    assert record == json.loads(result.tuning_record())
    assert (record["grid"], record["protocol"], record["best_params"]) == ("openood", "ood_val",
                                                                          {"percentile": best})
    # two swept keys: OpenOOD's recursive_generator varies the first key fastest
    vra = oodbench.tune("vra", "openood", id_val, ood_val, fit=train)
    assert vra.table[["upper_percentile", "lower_percentile"]].values[:5].tolist() == [
        [85.0, 1.0], [90.0, 1.0], [95.0, 1.0], [99.0, 1.0], [85.0, 5.0]]
    assert len(vra.table) == 16
    # OpenOOD does not search DICE (APS_mode: False): its configured point only
    dice = oodbench.tune("dice", "openood", id_val, ood_val, fit=train)
    assert len(dice.table) == 1 and dice.detector.sparsity == 90.0
    with pytest.raises(InvalidInputError, match="no 'openood' preset"):
        oodbench.tune("ash_p", "openood", id_val, ood_val)
    with pytest.raises(InvalidInputError, match="unknown named grid 'opneood'.*'paper'"):
        oodbench.tune("react", "opneood", id_val, ood_val, fit=train)
