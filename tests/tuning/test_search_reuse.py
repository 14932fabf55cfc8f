"""A search over KNN's k searches each scored set once (``oodbench.tuning.dispatch`` runs inside
``reuse_searches()``), and every trial scores as an independent fit would, to the last bit: the
AUROCs and tables are compared with ``==`` (same scores, same metric code)."""

from __future__ import annotations

import pytest

import oodbench
from oodbench import metrics
from oodbench.detectors import create
from oodbench.detectors._neighbours import NeighbourIndex
from oodbench.tuning import Range
from tests.tuning.test_tune import data  # noqa: F401 - the shared fixture

#: k up to 40 of a 500-row bank: above the papers' share, as the other tuning tests' banks
pytestmark = pytest.mark.filterwarnings("ignore::oodbench.detectors._stats.LargeKWarning")


def count_searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The k of every neighbour search that runs (``NeighbourIndex.fresh_search``), in order."""
    searched: list[int] = []
    original = NeighbourIndex.fresh_search
    monkeypatch.setattr(NeighbourIndex, "fresh_search",
                        lambda self, features, k: (searched.append(k), original(self, features, k))[1])
    return searched


def test_knn_trials_search_each_set_once(data, monkeypatch):  # noqa: F811
    train, id_val, ood_val = data
    searched = count_searches(monkeypatch)
    # k >= 2: faiss' k = 1 kernel is a search of its own
    result = oodbench.tune("knn", {"k": Range(2, 40)}, id_val, ood_val, fit=train, search="tpe",
                           n_trials=8)
    assert searched == [500, 500]  # id_val and ood_val, each at the whole 500-row bank
    monkeypatch.undo()  # the checks below search afresh, uncounted
    assert result.table["k"].nunique() > 1
    for k, auroc in zip(result.table["k"], result.table["auroc"]):
        det = create("knn", k=int(k)).fit(train)
        assert auroc == metrics.auroc(det.score(id_val), det.score(ood_val))


def test_the_plain_ood_val_grid_searches_each_set_once(data, monkeypatch):  # noqa: F811
    """The OOD-val grid (no search strategy: every point of the grid) reuses the search too."""
    train, id_val, ood_val = data
    searched = count_searches(monkeypatch)
    result = oodbench.tune("knn", {"k": [2, 5, 9, 20]}, id_val, ood_val, fit=train)
    assert searched == [500, 500]  # id_val and ood_val once, at the whole 500-row bank (< 512)
    monkeypatch.undo()  # the checks below search afresh, uncounted
    for k, auroc in zip(result.table["k"], result.table["auroc"]):
        det = create("knn", k=int(k)).fit(train)
        assert auroc == metrics.auroc(det.score(id_val), det.score(ood_val))


@pytest.mark.filterwarnings("ignore::oodbench.tuning.edges.EdgeOfSpaceWarning")  # a 3-point grid
def test_a_staged_protocol_tunes_as_without_reuse(tiny, monkeypatch):
    """The noise protocol (its own search, inside ``oodbench.tuning.dispatch``): id_val is searched
    once for every point and stage; each simulated-OOD set once per stage. The whole result
    equals that of searching afresh every time."""
    model, fit, id_val, _ = tiny
    searched = count_searches(monkeypatch)

    def run():
        return oodbench.tune("knn", {"k": [2, 5, 9]}, id_val, None, fit=fit, model=model,
                             protocol="noise", settings={"sigmas": [32], "n_sets": 2, "seed": 1})

    reused = run()
    bank = len(fit)  # the first depth (512) capped at the bank
    assert searched == [bank] * 5  # id_val; 2 sets of stage 0; 2 fresh sets of stage 1
    searched.clear()
    monkeypatch.setattr(NeighbourIndex, "search", NeighbourIndex.fresh_search)  # no reuse
    fresh = run()
    assert searched == [2, 2, 2, 5, 5, 5, 9, 9, 9] + [reused.best_params["k"]] * 3
    assert reused.table.equals(fresh.table) and reused.provenance == fresh.provenance
