"""KNN's and NNGuide's neighbour searches reused across tuning trials (``_search_memo``).

Every comparison here is exact (``np.array_equal``): a reused search must give the bits a fresh
detector gives, which the memo's plan argument claims (its module docstring), not values within
a tolerance.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from oodbench import compute
from oodbench.detectors import _search_memo as memo_module
from oodbench.detectors import create
from oodbench.detectors._neighbours import NeighbourIndex
from oodbench.detectors._search_memo import reuse_searches
from oodbench.extract.activations import Activations
from tests.detectors.conftest import make_activations

#: k up to 1,100 of a 2,000-row bank: far above the papers' share, on purpose
pytestmark = pytest.mark.filterwarnings("ignore::oodbench.detectors._stats.LargeKWarning")

#: ks on both sides of faiss' k = 1 kernel and of its heap / reservoir switch at 100, and above
#: the memo's first depth (512), so deeper searches follow
KS = [7, 1, 2, 3, 50, 99, 100, 101, 250, 512, 513, 700, 1100]
#: bytes per working chunk for a torch run whose tiles change with k above 1024 neighbours:
#: 16384 // (4 k) query rows per tile, 3 for k = 1100 but 2 for the 2,000 of a deeper search
SMALL_CHUNKS = 16 * 2**10
#: the searches run for KS: 7 at the first depth (512); k = 1 alone on faiss (its own kernel);
#: 513 at twice the depth; 1100 at the whole bank, or, where that changes the tiles, at 1100
SEARCHED = {"numpy": [512, 1, 1024, 2000], "torch": [512, 1024, 2000],
            "small-tiles": [512, 1024, 1100]}
#: the ks of the small-tiles run (hundreds of tiny tiles per search: slow), the same searches
SMALL_TILES_KS = [7, 2, 513, 1100]


@contextmanager
def backend(kind: str) -> Iterator[compute.Backend]:
    """faiss-cpu, torch on the CPU, or torch on the CPU in small chunks."""
    if kind == "numpy":
        with compute.use("numpy") as chosen:
            yield chosen
    elif kind == "torch":
        with compute.use("torch", "cpu") as chosen:
            yield chosen
    else:
        with compute.use("torch", "cpu", chunk_bytes=SMALL_CHUNKS) as chosen:
            yield chosen


def make_bank(n: int = 2000) -> Activations:
    """A bank with ties: every 4th row repeats the one before."""
    train = make_activations(n, 10, 16, seed=0)
    train.features[3::4] = train.features[2::4]
    return train


def make_queries(train: Activations) -> Activations:
    """ID and OOD rows, 20 of them copies of bank rows (distance 0), 10 repeated."""
    queries = Activations.concatenate([make_activations(150, 10, 16, seed=1),
                                       make_activations(100, 10, 16, seed=2, ood=True)])
    queries.features[:20] = train.features[100:120]
    queries.features[20:30] = queries.features[30:40]
    return queries


@pytest.fixture(scope="module")
def bank_and_queries() -> tuple[Activations, Activations]:
    train = make_bank()
    return train, make_queries(train)


@pytest.fixture
def searches(monkeypatch) -> list[int]:
    """The k of every search actually run (``NeighbourIndex.fresh_search``)."""
    seen: list[int] = []
    original = NeighbourIndex.fresh_search

    def counted(self, features, k):
        seen.append(k)
        return original(self, features, k)

    monkeypatch.setattr(NeighbourIndex, "fresh_search", counted)
    return seen


@pytest.mark.parametrize("kind", ["numpy", "torch", "small-tiles"])
@pytest.mark.parametrize("name", ["knn", "nnguide"])
def test_trials_score_as_fresh_detectors(name, kind, bank_and_queries, searches):
    train, queries = bank_and_queries
    ks = SMALL_TILES_KS if kind == "small-tiles" else KS
    with backend(kind):
        fresh = {k: create(name, k=k).fit(train).score(queries) for k in ks}
        searches.clear()
        with reuse_searches():
            for k in ks + ks[::-1]:  # a new detector per trial, as a tuning search makes
                assert np.array_equal(create(name, k=k).fit(train).score(queries), fresh[k]), k
    assert searches == SEARCHED[kind]


def test_no_memo_outside_a_tuning_search(bank_and_queries, searches):
    train, queries = bank_and_queries
    det = create("knn", k=5).fit(train)
    det.score(queries)
    det.score(queries)
    assert searches == [5, 5]
    with reuse_searches() as outer:
        with reuse_searches() as inner:
            assert inner is outer  # nested uses share the outermost memo
            det.score(queries)
        assert len(outer) == 1
    det.score(queries)
    assert searches == [5, 5, 512, 5]  # the memo went with the outer context


@pytest.mark.parametrize("where", ["bank", "queries"])
def test_non_finite_data_is_searched_as_before(where, bank_and_queries, searches):
    train, queries = bank_and_queries
    if where == "bank":
        train = train.subset(np.arange(len(train)))
        train.features = train.features.copy()
        train.features[7, 3] = np.nan
    else:
        queries = queries.subset(np.arange(len(queries)))
        queries.features = queries.features.copy()
        queries.features[5, 3] = np.nan
    det = create("knn", k=9).fit(train)
    fresh = det.score(queries)
    searches.clear()
    with reuse_searches() as memo:
        assert np.array_equal(det.score(queries), fresh, equal_nan=True)
        assert np.array_equal(create("knn", k=8).fit(train).score(queries),
                              create("knn", k=8).fit(train).score(queries), equal_nan=True)
        assert len(memo) == 0
    assert searches == [9, 8, 8]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_bank_changed_in_place_is_searched_again(kind, bank_and_queries, searches):
    train, queries = bank_and_queries
    with backend(kind), reuse_searches():
        det = create("knn", k=5).fit(train)
        before = det.score(queries)
        bank = det.index_.host_bank_ if kind == "numpy" else det.index_.bank_.numpy()
        bank[:600] = bank[600:1200].copy()  # the same array, other rows
        changed = det.score(queries)
        assert searches == [512, 512]
    with backend(kind):
        assert np.array_equal(changed, det.score(queries))  # a fresh search of the new bank
    assert not np.array_equal(changed, before)


def test_queries_changed_in_place_are_searched_again(bank_and_queries, searches):
    train, queries = bank_and_queries
    mine = queries.subset(np.arange(len(queries)))
    mine.features = queries.features.copy()
    det = create("knn", k=5).fit(train)
    with reuse_searches():
        before = det.score(mine)
        mine.features[:40] = mine.features[40:80].copy()
        changed = det.score(mine)
        assert searches == [512, 512]
    assert np.array_equal(changed, det.score(mine)) and not np.array_equal(changed, before)


def test_memory_stays_within_max_bytes(bank_and_queries, searches, monkeypatch):
    """The least recently used entry goes first; an entry larger than the budget is not kept."""
    train, queries = bank_and_queries
    det = create("knn", k=5).fit(train)
    parts = [queries.subset(np.arange(i * 50, (i + 1) * 50)) for i in range(3)]
    entry = 50 * 512 * 4  # float32 values of 50 queries at depth 512
    monkeypatch.setattr(memo_module, "MAX_BYTES", 2 * entry)
    with reuse_searches() as memo:
        for part in (parts[0], parts[1], parts[0], parts[2]):  # parts[1] least recently used
            det.score(part)
            assert memo.nbytes <= memo_module.MAX_BYTES
        assert len(memo) == 2 and searches == [512, 512, 512]
        det.score(parts[0])
        det.score(parts[1])
        assert searches == [512, 512, 512, 512]
        assert np.array_equal(det.score(queries), create("knn", k=5).fit(train).score(queries))
        assert memo.nbytes <= memo_module.MAX_BYTES  # 250 queries' values do not fit: not kept
