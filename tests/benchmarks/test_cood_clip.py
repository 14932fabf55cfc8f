"""A CLIP zero-shot classifier through extraction, the cache and the C-OOD benchmark (tiny data)."""

from __future__ import annotations

import numpy as np

from oodbench.benchmarks.cood import CoodBenchmark
from oodbench.data import ArraySource
from oodbench.detectors import create
from oodbench.extract import extract
from oodbench.metrics import auroc
from tests._clip_fixtures import tiny_clip

ID_CLASSES = ["cat", "dog", "car", "tree"]


def _sources():
    rng = np.random.default_rng(0)
    id_labels = np.repeat(np.arange(4), 6)
    id_test = ArraySource(rng.integers(0, 256, (24, 40, 40, 3), dtype=np.uint8), id_labels, name="clip-id")
    pool_labels = np.repeat([11, 13, 17, 19, 23, 29], 8)  # non-contiguous pool class ids
    pool = ArraySource(rng.integers(0, 256, (48, 40, 40, 3), dtype=np.uint8), pool_labels, name="clip-pool")
    return id_test, pool


def test_clip_extraction_is_cached_and_consistent():
    model = tiny_clip(ID_CLASSES)
    id_test, _ = _sources()
    first = extract(model, id_test, progress=False)
    second = extract(model, id_test, progress=False)
    assert not first.meta.get("cache_hit") and second.meta["cache_hit"]
    np.testing.assert_array_equal(np.asarray(first.logits), np.asarray(second.logits))
    # the cached head is CLIP's zero-shot head: logits = normalised features @ (scale * text).T
    np.testing.assert_allclose(np.linalg.norm(np.asarray(second.features), axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(second.logits), np.asarray(second.features) @ np.asarray(second.head_weight).T, rtol=1e-4, atol=1e-4
    )


def test_clip_through_the_cood_benchmark(tmp_path):
    model = tiny_clip(ID_CLASSES)
    id_test, pool = _sources()
    vocab = tmp_path / "vocab.tsv"
    vocab.write_text("".join(f"noun\tword{i}\n" for i in range(30)) + "".join(f"adj\tadj{i}\n" for i in range(10)))
    detectors = [create("msp"), create("mcm"), create("neglabel", vocabulary=str(vocab), n_groups=2, neg_fraction=0.5)]
    bench = CoodBenchmark(id_test, pool, window=2, n_levels=3, seed=0)
    measured = bench.measure(model, detectors, progress=False)
    table = measured.rows
    assert sorted(table["detector"].unique()) == ["mcm", "msp", "neglabel"]
    assert len(table) == 3 * 3
    assert table["auroc"].between(0, 1).all() and np.isfinite(table["fpr95_id"]).all()
    # every level holds `window` pool classes, and the rows' AUROC is the metric on the level's images
    for det in detectors:
        levels = bench.levels_[det.name]
        assert [len(lv) for lv in levels] == [2, 2, 2]
        assert set(np.concatenate(levels)) <= {11, 13, 17, 19, 23, 29}
    msp_rows = table[table["detector"] == "msp"].sort_values("level")
    id_kappa = create("msp").score(bench.id_activations_)
    pool_kappa = create("msp").score(bench.pool_activations_)
    pool_labels = np.asarray(bench.pool_labels_)[bench.pool_positions_]
    is_test = np.isin(bench.pool_positions_, bench.test_idx_)
    kept_id, kept_levels = measured.scores[("msp", "{}")]  # the scores behind the rows
    np.testing.assert_array_equal(kept_id, id_kappa)
    for (_, row), classes in zip(msp_rows.iterrows(), bench.levels_["msp"]):
        level_kappa = pool_kappa[is_test & np.isin(pool_labels, classes)]
        assert row["auroc"] == auroc(id_kappa, level_kappa)
        np.testing.assert_array_equal(kept_levels[row["group"]], level_kappa)
