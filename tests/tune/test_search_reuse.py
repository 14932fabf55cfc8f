"""A Bayesian search over KNN's k searches each scored set once (``oodbench.tune.dispatch``
runs inside ``reuse_searches()``), and every trial scores as an independent fit would, to the
last bit: the AUROCs are compared with ``==`` (same scores, same metric code)."""

from __future__ import annotations

import pytest

import oodbench
from oodbench import metrics
from oodbench.detectors import create
from oodbench.detectors._neighbours import NeighbourIndex
from oodbench.tune import Range
from tests.tune.test_tune import data  # noqa: F401 - the shared fixture

#: k up to 40 of a 500-row bank: above the papers' share, as the other tuning tests' banks
pytestmark = pytest.mark.filterwarnings("ignore::oodbench.detectors._stats.LargeKWarning")


def test_knn_trials_search_each_set_once(data, monkeypatch):  # noqa: F811
    train, id_val, ood_val = data
    searched: list[int] = []
    original = NeighbourIndex.fresh_search
    monkeypatch.setattr(NeighbourIndex, "fresh_search",
                        lambda self, features, k: (searched.append(k), original(self, features, k))[1])
    # k >= 2: faiss' k = 1 kernel is a search of its own
    result = oodbench.tune("knn", {"k": Range(2, 40)}, id_val, ood_val, fit=train, search="tpe",
                           n_trials=8)
    assert searched == [500, 500]  # id_val and ood_val, each at the whole 500-row bank
    monkeypatch.setattr(NeighbourIndex, "fresh_search", original)
    assert result.table["k"].nunique() > 1
    for k, auroc in zip(result.table["k"], result.table["auroc"]):
        det = create("knn", k=int(k)).fit(train)
        assert auroc == metrics.auroc(det.score(id_val), det.score(ood_val))
