"""The C-OOD severity benchmark: hand-checked level construction and end-to-end evaluation."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from oodbench.benchmarks import cood
from oodbench.benchmarks.cood import (
    CoodBenchmark,
    group_labels,
    per_class_mean,
    severity_levels,
    severity_windows,
    split_per_class,
)
from oodbench.detectors import create
from oodbench.detectors.base import Detector
from oodbench.errors import (
    ClassCountMismatchError,
    EmptyInputError,
    InvalidInputError,
    NonFiniteError,
)
from oodbench.extract.activations import Activations
from tests._tolerance import U64, auroc_slack, gamma
from tests.detectors._reference import msp_error


@dataclass
class Logit0(Detector):
    """Test-only detector (not registered): kappa = the first logit, so tests set it directly."""

    name = "logit0"

    def _score(self, acts: Activations) -> np.ndarray:
        return np.asarray(acts.logits)[:, 0]


def _acts(kappa: np.ndarray, labels: np.ndarray, n_classes: int = 3) -> Activations:
    """Activations whose first logit is ``kappa`` (the rest zeros)."""
    logits = np.zeros((len(kappa), n_classes), dtype=np.float64)
    logits[:, 0] = kappa
    return Activations(logits=logits, labels=np.asarray(labels, dtype=np.int64),
                       ids=np.array([f"s{i}" for i in range(len(kappa))]))


# -- severity_levels: hand-checked ---------------------------------------------------------------
def test_windows_sorted_and_started_as_the_paper() -> None:
    scores = np.array([5.0, 1, 3, 2, 4, 0, 6, 9, 8, 7])
    # ascending order of scores 0..9 -> class indices 5,1,3,2,4,0,6,9,8,7
    # 8 windows of 3; starts int(q * 8) for q = 0, 1/3, 2/3, 1 -> 0, 2, 5, 8 - 1 = 7
    sev = severity_windows(scores, window=3, n_levels=4)
    assert sev.order.tolist() == [5, 1, 3, 2, 4, 0, 6, 9, 8, 7]
    assert sev.starts.tolist() == [0, 2, 5, 7]
    assert [c.tolist() for c in sev.classes] == [[5, 1, 3], [3, 2, 4], [0, 6, 9], [9, 8, 7]]
    assert sev.scores.tolist() == [1.0, 3.0, 6.0, 8.0]  # means of (0,1,2), (2,3,4), (5,6,7), (7,8,9)
    np.testing.assert_allclose(sev.percentiles, [0, 1 / 3, 2 / 3, 1])
    assert [c.tolist() for c in severity_levels(scores, window=3, n_levels=4)] == [
        c.tolist() for c in sev.classes
    ]


def test_eleven_levels_start_indices() -> None:
    # 100 classes, window 10: 91 windows; int(i / 10 * 91) = 0, 9, 18, ..., 81 and 91 - 1 = 90
    scores = np.arange(100.0)[::-1]  # class 99 is the easiest
    sev = severity_windows(scores, window=10, n_levels=11)
    assert sev.starts.tolist() == [0, 9, 18, 27, 36, 45, 54, 63, 72, 81, 90]
    assert sev.classes[0].tolist() == list(range(99, 89, -1))
    assert sev.classes[-1].tolist() == list(range(9, -1, -1))
    assert np.all(np.diff(sev.scores) > 0)  # level 0 easiest, level 10 hardest


def test_last_level_moved_back_into_range() -> None:
    # window 1 over 5 classes: 5 windows; q = 1 gives int(5) = 5, moved back to 4 (the hardest)
    sev = severity_windows(np.array([3.0, 0.0, 4.0, 1.0, 2.0]), window=1, n_levels=2)
    assert sev.starts.tolist() == [0, 4]
    assert [c.tolist() for c in sev.classes] == [[1], [2]]
    # window = all classes: one window, every level... needs n_levels <= n_windows
    with pytest.raises(InvalidInputError, match="n_levels"):
        severity_windows(np.arange(5.0), window=5, n_levels=2)


def test_ties_keep_class_index_order() -> None:
    sev = severity_windows(np.array([1.0, 1.0, 1.0, 0.0]), window=2, n_levels=2)
    assert [c.tolist() for c in sev.classes] == [[3, 0], [1, 2]]


def test_disjoint_selection() -> None:
    scores = np.array([5.0, 1, 3, 2, 4, 0, 6, 9, 8, 7])  # order 5,1,3,2,4,0,6,9,8,7
    sev = severity_windows(scores, window=3, n_levels=3, selection="disjoint")
    assert sev.starts.tolist() == [0, 3, 6]
    assert [c.tolist() for c in sev.classes] == [[5, 1, 3], [2, 4, 0], [6, 9, 8]]
    two = severity_levels(scores, window=3, n_levels=2, selection="disjoint")
    assert [c.tolist() for c in two] == [[5, 1, 3], [6, 9, 8]]  # blocks 0 and 2
    np.testing.assert_allclose(sev.percentiles, [0, 3 / 7, 6 / 7])
    with pytest.raises(InvalidInputError, match="non-overlapping"):
        severity_levels(scores, window=3, n_levels=4, selection="disjoint")


def test_matches_a_literal_loop_of_the_paper_algorithm() -> None:
    rng = np.random.default_rng(3)
    scores = rng.normal(size=257)
    window, n_levels = 40, 11
    # reference: explicit loops, as described in the paper's code
    order = sorted(range(scores.size), key=lambda c: (scores[c], c))
    sorted_scores = [scores[c] for c in order]
    means = [sum(sorted_scores[s : s + window]) / window for s in range(scores.size - window + 1)]
    starts = [int(q * len(means)) for q in np.linspace(0, 1, n_levels)]
    starts[-1] -= 1
    sev = severity_windows(scores, window=window, n_levels=n_levels)
    assert sev.starts.tolist() == starts
    assert [c.tolist() for c in sev.classes] == [order[s : s + window] for s in starts]
    # window means from prefix sums of all 257 scores (|s| < 4): within gamma(257) of their
    # sizes, ~2e-13 absolute, which a mean near 0 needs as a floor
    np.testing.assert_allclose(sev.scores, [means[s] for s in starts], rtol=1e-12,
                               atol=gamma(scores.size, U64) * np.abs(scores).sum() / window)


@pytest.mark.parametrize(
    ("scores", "kwargs", "error", "match"),
    [
        (np.arange(5.0), {"window": 6}, InvalidInputError, "larger than the 5 OOD classes"),
        (np.arange(5.0), {"window": 0}, InvalidInputError, "positive integer"),
        (np.arange(5.0), {"window": 2, "n_levels": 1}, InvalidInputError, "n_levels >= 2"),
        (np.arange(5.0), {"window": 2, "n_levels": 5}, InvalidInputError, "only 4 windows"),
        (np.arange(5.0), {"window": 2, "selection": "x"}, InvalidInputError, "selection"),
        (np.array([0.0, np.nan]), {"window": 1, "n_levels": 2}, NonFiniteError, "NaN"),
        (np.zeros((2, 2)), {"window": 1}, InvalidInputError, "1-D"),
        (np.zeros(0), {"window": 1}, EmptyInputError, "at least one"),
    ],
)
def test_bad_arguments_are_explained(scores, kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        severity_levels(scores, **kwargs)


# -- per-class means and the split -----------------------------------------------------------------
def test_per_class_mean_with_non_contiguous_labels() -> None:
    rng = np.random.default_rng(0)
    labels = rng.choice([7, 1000, 42, 99999], size=500)
    scores = rng.normal(size=500)
    classes, means, counts = per_class_mean(scores, labels)
    expected = pd.Series(scores).groupby(labels).agg(["mean", "size"])
    assert classes.tolist() == expected.index.tolist() == [7, 42, 1000, 99999]
    # float64 sums of ~125 scores per class in two orders (NumPy, pandas): absolute floor for
    # means near 0
    np.testing.assert_allclose(means, expected["mean"].to_numpy(), rtol=1e-12,
                               atol=gamma(scores.size, U64) * np.abs(scores).max())
    assert counts.tolist() == expected["size"].tolist()


def test_group_labels_equals_np_unique() -> None:
    rng = np.random.default_rng(5)
    for labels in (rng.integers(-5, 5, 300), rng.choice(10**8, 50)[rng.integers(0, 50, 1000)]):
        got = group_labels(labels)
        expected = np.unique(labels, return_inverse=True, return_counts=True)
        for a, b in zip(got, expected):
            assert np.array_equal(a, b.reshape(-1))


def test_split_per_class_is_seeded_and_per_class() -> None:
    labels = np.repeat([5, 17, 3], [200, 200, 7])
    est, test, dropped = split_per_class(labels, estimation_fraction=0.75, seed=1)
    assert dropped.size == 0
    assert np.intersect1d(est, test).size == 0 and est.size + test.size == labels.size
    for c, n_est in ((5, 150), (17, 150), (3, 5)):  # round(0.75 * 7) = 5
        assert (labels[est] == c).sum() == n_est
    again = split_per_class(labels, estimation_fraction=0.75, seed=1)
    other = split_per_class(labels, estimation_fraction=0.75, seed=2)
    assert np.array_equal(est, again[0]) and np.array_equal(test, again[1])
    assert not np.array_equal(est, other[0])
    # images_per_class: sample 100 of each class first; classes with fewer are dropped
    est, test, dropped = split_per_class(labels, images_per_class=100, seed=1)
    assert dropped.tolist() == [3]
    assert (labels[est] == 5).sum() == 75 and (labels[test] == 5).sum() == 25
    with pytest.raises(InvalidInputError, match="estimation_fraction"):
        split_per_class(labels, estimation_fraction=1.0)


# -- the benchmark on synthetic activations ----------------------------------------------------------
def _pool(n_classes: int, per_class: int, rng: np.random.Generator, offset: int = 1000):
    """Pool labels (non-contiguous ids) and per-class severity shifts."""
    ids = offset + 7 * np.arange(n_classes)  # labels need not be contiguous
    labels = np.repeat(ids, per_class)
    return labels, rng.normal(size=n_classes)


def test_perfect_detector_gets_auroc_one_at_every_level() -> None:
    rng = np.random.default_rng(0)
    n_id, n_cls = 300, 10
    id_labels = rng.integers(0, n_cls, n_id)
    id_logits = rng.normal(size=(n_id, n_cls))
    id_logits[np.arange(n_id), id_labels] += 20.0  # confident and correct
    pool_labels, _ = _pool(60, 20, rng)
    pool_logits = rng.normal(scale=0.1, size=(pool_labels.size, n_cls))  # near-uniform softmax
    id_acts = Activations(logits=id_logits, labels=id_labels, ids=np.arange(n_id).astype(str))
    pool_acts = Activations(logits=pool_logits, labels=pool_labels,
                            ids=np.arange(pool_labels.size).astype(str))
    bench = CoodBenchmark(id_acts, pool_acts, n_levels=5)  # window = 10 ID classes
    df = bench.run(None, [create("msp"), create("maxlogit")])
    assert len(df) == 10
    assert df["group"].tolist()[:5] == [f"level_{i}" for i in range(5)]
    assert (df["auroc"] == 1.0).all()
    assert (df["fpr95_id"] == 0.0).all() and (df["fpr95_ood"] == 0.0).all()
    assert (df["id_accuracy"] == 1.0).all()
    assert (df["n_classes"] == 10).all() and (df["n_ood"] == 10 * 5).all()  # 25 % of 20
    assert (df["n_id"] == n_id).all()
    for name in ("msp", "maxlogit"):
        levels = bench.level_classes(name)
        assert len(levels) == 5 and all(lv.size == 10 for lv in levels)
        assert set(np.concatenate(levels)) <= set(pool_labels)
        sub = df[df["detector"] == name]
        assert np.all(np.diff(sub["severity"].to_numpy()) >= 0)  # severity grows with level


def test_random_detector_gets_auroc_near_half() -> None:
    rng = np.random.default_rng(1)
    n_id, n_cls = 2000, 10
    id_acts = Activations(logits=rng.normal(size=(n_id, n_cls)),
                          labels=rng.integers(0, n_cls, n_id), ids=np.arange(n_id).astype(str))
    pool_labels, _ = _pool(80, 40, rng)
    pool_acts = Activations(logits=rng.normal(size=(pool_labels.size, n_cls)), labels=pool_labels,
                            ids=np.arange(pool_labels.size).astype(str))
    df = CoodBenchmark(id_acts, pool_acts, window=20, n_levels=5).run(None, [create("msp")])
    # each level: 20 classes x 10 test images vs 2000 ID; AUROC standard error ~ 0.02
    assert np.all(np.abs(df["auroc"] - 0.5) < 0.08), df["auroc"].tolist()


def test_levels_and_metrics_match_an_independent_computation() -> None:
    rng = np.random.default_rng(2)
    pool_labels, shift = _pool(50, 12, rng)
    kappa_pool = shift[(pool_labels - 1000) // 7] + rng.normal(scale=0.5, size=pool_labels.size)
    kappa_id = rng.normal(loc=1.0, size=400)
    id_labels = rng.integers(0, 3, 400)
    bench = CoodBenchmark(_acts(kappa_id, id_labels), _acts(kappa_pool, pool_labels),
                          window=8, n_levels=6, seed=5)
    df = bench.run(None, [Logit0()])

    # reference: pandas means over the estimation images, a sorted list, windows by slicing
    est, test = bench.estimation_idx_, bench.test_idx_
    means = pd.Series(kappa_pool[est]).groupby(pool_labels[est]).mean()
    ordered = means.sort_values(kind="stable")
    n_windows = len(ordered) - 8 + 1
    starts = [int(q * n_windows) for q in np.linspace(0, 1, 6)]
    starts[-1] -= 1
    id_correct = np.zeros((400, 3))
    id_correct[:, 0] = kappa_id
    correct = id_correct.argmax(1) == id_labels
    for level, s in enumerate(starts):
        classes = ordered.index[s : s + 8].to_numpy()
        assert bench.level_classes("logit0", level).tolist() == classes.tolist()
        ood = kappa_pool[test][np.isin(pool_labels[test], classes)]
        row = df.iloc[level]
        assert row["n_ood"] == ood.size == 8 * 3  # 12 images: 9 estimation, 3 test
        assert row["auroc"] == pytest.approx(
            roc_auc_score(np.r_[np.ones(400), np.zeros(ood.size)], np.r_[kappa_id, ood]), abs=1e-12
        )
        # the same scores (a selection of one logit) averaged in NumPy and pandas: means of
        # at most 400 values of size < 5, ~1e-14 apart; the smallest mean here is 0.15
        assert row["severity"] == pytest.approx(ordered.iloc[s : s + 8].mean(), rel=1e-12)
        assert row["ood_mean_kappa"] == pytest.approx(ood.mean(), rel=1e-12)
        assert row["id_mean_kappa"] == pytest.approx(kappa_id.mean(), rel=1e-12)
        assert row["id_accuracy"] == pytest.approx(correct.mean())
        assert row["percentile"] == pytest.approx(level / 5)
    assert set(df.columns) >= {
        "detector", "hyperparams", "group", "severity", "percentile", "n_id", "n_ood",
        "n_classes", "auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out", "id_accuracy",
        "id_auroc", "id_mean_kappa", "ood_mean_kappa",
    }


def test_seed_determines_the_split_and_results() -> None:
    rng = np.random.default_rng(4)
    pool_labels, shift = _pool(30, 10, rng)
    kappa_pool = shift[(pool_labels - 1000) // 7] + rng.normal(size=pool_labels.size)
    id_a = _acts(rng.normal(1.0, size=200), rng.integers(0, 3, 200))
    pool_a = _acts(kappa_pool, pool_labels)

    def run(seed: int) -> pd.DataFrame:
        return CoodBenchmark(id_a, pool_a, window=5, n_levels=4, seed=seed).run(None, [Logit0()])

    pd.testing.assert_frame_equal(run(0), run(0))
    assert not run(0)["auroc"].equals(run(1)["auroc"])


def test_levels_per_detector_configuration() -> None:
    rng = np.random.default_rng(6)
    pool_labels = np.repeat(np.arange(30), 8)
    pool = Activations(logits=rng.normal(size=(240, 4)) * rng.uniform(0.1, 3, size=(240, 1)),
                       labels=pool_labels, ids=np.arange(240).astype(str))
    id_a = Activations(logits=rng.normal(size=(50, 4)) * 3, labels=rng.integers(0, 4, 50),
                       ids=np.arange(50).astype(str))
    bench = CoodBenchmark(id_a, pool, window=4, n_levels=3)
    cold, hot = create("energy", temperature=1.0), create("energy", temperature=50.0)
    df = bench.run(None, [cold, hot])
    assert df["hyperparams"].nunique() == 2 and len(df) == 6
    assert bench.level_classes("energy") is bench.level_classes(hot)  # a name: the last run
    for det in (cold, hot):
        kappa = det.score(pool)[bench.estimation_idx_]
        means = pd.Series(kappa).groupby(pool_labels[bench.estimation_idx_]).mean()
        expected = severity_levels(means.to_numpy(), window=4, n_levels=3)
        got = bench.level_classes(det)
        assert [g.tolist() for g in got] == [means.index[e].tolist() for e in expected]
    with pytest.raises(InvalidInputError, match="has not been run"):
        bench.level_classes(create("energy", temperature=2.0))


def test_named_benchmark_and_evaluate() -> None:
    from oodbench import benchmarks

    rng = np.random.default_rng(7)
    id_a = _acts(rng.normal(1.0, size=40), rng.integers(0, 3, 40))
    pool_a = _acts(rng.normal(size=60), np.repeat(np.arange(6), 10))
    bench = benchmarks.get("cood", id_test=id_a, ood_pool=pool_a, window=2, n_levels=3)
    assert isinstance(bench, CoodBenchmark) and "cood" in benchmarks.available()
    pd.testing.assert_frame_equal(bench.evaluate(None, Logit0()), bench.run(None, [Logit0()]))


def test_pool_class_that_is_an_id_class_is_rejected() -> None:
    rng = np.random.default_rng(0)
    id_a = _acts(rng.normal(size=30), np.repeat([0, 1, 2], 10))
    id_a.meta["class_names"] = ["cat", "dog", "tench"]
    pool_a = _acts(rng.normal(size=40), np.repeat([0, 1, 2, 3], 10))
    pool_a.meta["class_names"] = ["goldfish", "tench", "zebra", "dog"]
    with pytest.raises(InvalidInputError, match="2 OOD pool classes are also ID classes: dog, tench"):
        CoodBenchmark(id_a, pool_a, window=2, n_levels=2)
    pool_a.meta["class_names"] = ["goldfish", "hare", "zebra", "ox"]
    bench = CoodBenchmark(id_a, pool_a, window=2, n_levels=2)
    bench.run(None, [Logit0()])
    names = bench.level_classes("logit0", names=True)
    assert len(names) == 2 and all(len(n) == 2 for n in names)
    assert set(sum(names, [])) <= {"goldfish", "hare", "zebra", "ox"}


def test_id_classes_restrict_the_logits_and_the_overlap_check() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 12)
    acts = Activations(logits=rng.normal(size=(72, 6)), labels=labels,
                       ids=np.arange(72).astype(str), meta={"class_names": list("abcdef")})
    id_rows, pool_rows = np.flatnonzero(labels < 2), np.flatnonzero(labels >= 2)
    bench = CoodBenchmark(acts.subset(id_rows), acts.subset(pool_rows), id_classes=[0, 1],
                          n_levels=2)
    df = bench.run(None, [create("msp")])
    assert (df["n_classes"] == 2).all()  # window = the 2 ID classes
    expected_acc = (acts.logits[id_rows][:, :2].argmax(1) == labels[id_rows]).mean()
    assert df["id_accuracy"].iloc[0] == pytest.approx(expected_acc)
    with pytest.raises(InvalidInputError, match="also ID classes: c"):
        CoodBenchmark(acts.subset(id_rows), acts.subset(pool_rows), id_classes=[0, 2])


def test_input_errors() -> None:
    rng = np.random.default_rng(0)
    id_a = _acts(rng.normal(size=20), np.zeros(20))
    with pytest.raises(InvalidInputError, match="label -1"):
        CoodBenchmark(id_a, _acts(rng.normal(size=20), -np.ones(20)))
    with pytest.raises(InvalidInputError, match="Source or Activations"):
        CoodBenchmark(id_a, np.zeros(3))  # type: ignore[arg-type]
    pool = _acts(rng.normal(size=40), np.repeat(np.arange(4), 10))
    with pytest.raises(InvalidInputError, match="4 classes give only 2 windows of 3 classes"):
        # the window defaults to the number of ID classes (3 logits)
        CoodBenchmark(id_a, pool, n_levels=3).run(None, [Logit0()])
    with pytest.raises(InvalidInputError, match="window=5 is larger than the 4"):
        CoodBenchmark(id_a, pool, window=5).run(None, [Logit0()])
    with pytest.raises(InvalidInputError, match="window=5 is larger"):  # before any extraction
        CoodBenchmark(id_a, pool, window=5)
    with pytest.raises(InvalidInputError, match="live network"):
        CoodBenchmark(id_a, pool, id_classes=[0, 1], window=2, n_levels=2).run(
            None, [create("odin")]
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CoodBenchmark(id_a, _acts(rng.normal(size=11), np.r_[np.zeros(10), 1]), window=1,
                      n_levels=1, selection="disjoint")
    assert any("dropped 1 pool classes" in str(w.message) for w in caught)


# -- through the extraction engine ---------------------------------------------------------------
def test_sources_are_extracted_once_and_corrupt_images_skipped() -> None:
    from scipy.special import softmax

    from oodbench.extract import SkippedImagesWarning, extract
    from tests.extract._toy import RandomImages, TinyNet

    model = TinyNet(num_classes=3)
    id_src = RandomImages(60, num_classes=3, seed=0, name="id")
    pool_labels = np.repeat(100 + 5 * np.arange(12), 10)  # 12 pool classes, ids 100..155
    pool_src = RandomImages(120, seed=1, name="pool", labels=pool_labels, corrupt=[3, 57])
    bench = CoodBenchmark(id_src, pool_src, window=3, n_levels=4)
    with pytest.warns(SkippedImagesWarning):
        df = bench.run(model, [create("msp")], progress=False, batch_size=32)
    calls = model.calls
    with pytest.warns(SkippedImagesWarning):  # the cache remembers and reports the skipped images
        bench.run(model, [create("msp")], progress=False, batch_size=32)
    assert model.calls == calls  # the second run reads the cache

    # independent: the cached activations, softmax by scipy, AUROC by scikit-learn
    id_acts = extract(model, id_src, capture=("logits",), progress=False, batch_size=32)
    unlabelled = RandomImages(120, seed=1, name="pool", labels=-np.ones(120, np.int64),
                              corrupt=[3, 57])  # the same images, extracted as OOD (label -1)
    with pytest.warns(SkippedImagesWarning):
        pool_acts = extract(model, unlabelled, capture=("logits",), progress=False, batch_size=32)
    assert 3 not in pool_acts.source_indices and 57 not in pool_acts.source_indices
    id_msp = softmax(np.asarray(id_acts.logits, dtype=np.float64), axis=1).max(1)
    pool_msp = softmax(np.asarray(pool_acts.logits, dtype=np.float64), axis=1).max(1)
    # the benchmark's float32 exps against scipy's float64: pairs within the rounding bounds
    # may swap (auroc_slack)
    id_bound, pool_bound = msp_error(id_acts.logits), msp_error(pool_acts.logits)
    position = np.asarray(pool_acts.source_indices)
    assert np.array_equal(np.sort(bench.pool_positions_), position)  # every image was used
    is_test = np.isin(position, bench.test_idx_)
    for level in range(4):
        classes = bench.level_classes("msp", level)
        in_level = is_test & np.isin(pool_labels[position], classes)
        ood = pool_msp[in_level]
        row = df.iloc[level]
        assert row["n_ood"] == ood.size
        assert row["auroc"] == pytest.approx(
            roc_auc_score(np.r_[np.ones(60), np.zeros(ood.size)], np.r_[id_msp, ood]),
            abs=auroc_slack(id_msp, ood, id_bound, pool_bound[in_level]),
        )
    assert df["n_ood"].sum() <= 4 * 3 * 3  # 3 classes x (at most) 3 test images, minus corrupt


def test_run_checks_the_default_window_before_extracting() -> None:
    """Issue 23 item 3: with a 3-class pool, ``run`` extracted the whole pool before raising
    that the default window (the model's 1000 classes) does not fit; it must raise first."""
    from tests.extract._toy import RandomImages, TinyNet

    model = TinyNet(num_classes=4)
    id_src = RandomImages(12, num_classes=4, seed=0, name="id")
    pool_src = RandomImages(30, seed=1, name="pool", labels=np.repeat(100 + np.arange(3), 10))
    bench = CoodBenchmark(id_src, pool_src, n_levels=2)
    with pytest.raises(InvalidInputError, match="default window is the number of ID classes, 4"):
        bench.run(model, [create("msp")], progress=False)
    assert model.calls == 0  # no forward pass
    with pytest.raises(ClassCountMismatchError, match="id_classes refer to classes up to 7"):
        CoodBenchmark(id_src, pool_src, id_classes=[0, 7], window=1, n_levels=2).run(
            model, [create("msp")], progress=False)
    assert model.calls == 0


# -- real data: EfficientNet-Lite0 (real weights) on real ImageNet images ---------------------------
REAL_DETECTORS = ("msp", "maxlogit", "entropy", "energy")


@pytest.mark.heavy
def test_efficientnet_lite0_severity_levels_on_real_images(lite0_imagenet_val) -> None:
    model, val, acts = lite0_imagenet_val
    labels = np.asarray(val.labels)
    present = np.unique(labels)  # 725 classes
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(present)
    id_classes = np.sort(shuffled[: present.size // 2])
    id_rows = np.flatnonzero(np.isin(labels, id_classes))
    pool_rows = np.flatnonzero(~np.isin(labels, id_classes))
    assert np.array_equal(np.asarray(acts.source_indices), np.arange(len(val)))  # no skipped image

    with pytest.warns(UserWarning, match=r"dropped \d+ pool classes with fewer than 2 images"):
        bench = CoodBenchmark(acts.subset(id_rows), acts.subset(pool_rows), id_classes=id_classes,
                              window=20, n_levels=11, seed=0)
    df = bench.run(model, [create(name) for name in REAL_DETECTORS])

    table = df.pivot(index="level", columns="detector", values="auroc")[list(REAL_DETECTORS)]
    print("\nEfficientNet-Lite0, C-OOD AUROC per severity level "
          f"({id_classes.size} ID classes, {id_rows.size} ID images; pool {pool_rows.size} "
          f"images of {present.size - id_classes.size} classes, window 20):")
    print(table.round(4).to_string())
    print(df[df["detector"] == "msp"][["group", "severity", "percentile", "n_ood", "auroc",
                                        "fpr95_id", "id_accuracy"]].round(4).to_string(index=False))

    assert len(df) == 11 * len(REAL_DETECTORS)
    # the restricted model classifies its ID half well (top-1 of Lite0 on all 1000: ~75 %)
    assert df["id_accuracy"].iloc[0] > 0.7
    assert (df["n_classes"] == 20).all() and (df["n_ood"] >= 20).all()
    # severity: the easiest levels are easier to detect than the hardest ones (the paper's
    # finding); with ~25 OOD test images per level the curve is noisy, so compare the ends
    for name in REAL_DETECTORS:
        auroc = table[name].to_numpy()
        assert auroc[0] > 0.8 and auroc[:3].mean() > auroc[-3:].mean() + 0.03, (name, auroc)

    # the MSP rows again, independently from the cached activations with scikit-learn; the
    # benchmark's float32 exps are within msp_error of these float64 ones (a mean, and the
    # AUROC up to pairs within the bounds: auroc_slack)
    logits32 = np.asarray(acts.logits)[id_rows][:, id_classes]
    logits = logits32.astype(np.float64)
    id_msp = np.exp(logits - logits.max(1, keepdims=True))
    id_msp = (id_msp / id_msp.sum(1, keepdims=True)).max(1)
    id_bound = msp_error(logits32)
    msp_rows = df[df["detector"] == "msp"].reset_index(drop=True)
    assert msp_rows["id_mean_kappa"].iloc[0] == pytest.approx(id_msp.mean(), rel=1e-12,
                                                              abs=id_bound.mean())
    pool_acts, position = bench.pool_activations_, bench.pool_positions_
    assert np.isin(bench.used_idx_, position).all()  # every sampled pool image has a row
    # the pool is kept unrestricted (memory-mapped) and restricted block by block when scored
    pool_bound = msp_error(np.asarray(pool_acts.logits)[:, id_classes])
    pool_logits = np.asarray(pool_acts.logits, dtype=np.float64)[:, id_classes]
    assert pool_logits.shape == (position.size, id_classes.size)
    pool_msp = np.exp(pool_logits - pool_logits.max(1, keepdims=True))
    pool_msp = (pool_msp / pool_msp.sum(1, keepdims=True)).max(1)
    test_mask = np.isin(position, bench.test_idx_)
    for level in (0, 5, 10):
        classes = bench.level_classes("msp", level)
        in_level = test_mask & np.isin(labels[pool_rows][position], classes)
        ood = pool_msp[in_level]
        assert msp_rows["n_ood"].iloc[level] == ood.size
        expected = roc_auc_score(np.r_[np.ones(id_msp.size), np.zeros(ood.size)],
                                 np.r_[id_msp, ood])
        assert msp_rows["auroc"].iloc[level] == pytest.approx(
            expected, abs=auroc_slack(id_msp, ood, id_bound, pool_bound[in_level]))


def _class_split(seed: int = 0):
    """10 well-separated classes of one model: fit rows of every class, ID-test rows of classes
    0-4, and a pool of classes 5-9 (labelled 0-4 as pool classes)."""
    from tests.detectors.conftest import make_activations

    fit = make_activations(1000, 10, 32, seed=seed)
    test = make_activations(1000, 10, 32, seed=seed + 1)
    labels = np.asarray(test.labels)
    id_test = test.subset(np.flatnonzero(labels < 5))
    pool = test.subset(np.flatnonzero(labels >= 5))
    pool.labels = np.asarray(pool.labels) - 5
    return fit, id_test, pool


@pytest.mark.parametrize("name", ["knn", "klm"])
def test_id_classes_fit_only_on_id_class_rows(name) -> None:
    """Issue #11's shape: 10 classes, ID = 0-4, fit rows of all classes. A label-free detector
    fitted on every row has seen the OOD classes (KNN's bank, KLM's templates) and ranks the pool
    like ID; the benchmark fits it on the ID-class rows only, which gives the numbers of a fit on
    those rows by hand."""
    fit, id_test, pool = _class_split()
    bench = CoodBenchmark(id_test, pool, window=1, n_levels=5, id_classes=range(5), seed=0)
    measured = bench.measure(None, [create(name, fit_data="train")], fit_activations=fit)
    rows = measured.rows
    assert set(rows["fit_data"]) == {"train (id_classes rows)"}

    restricted = fit.restrict_classes(np.arange(5))
    by_hand = restricted.subset(np.flatnonzero(np.asarray(restricted.labels) >= 0))
    id_kappa, level_scores = measured.scores[(name, rows["hyperparams"].iloc[0])]
    det = create(name, fit_data="train").fit(by_hand)
    np.testing.assert_allclose(id_kappa, det.score(bench.id_activations_))
    assert rows["auroc"].mean() > 0.95

    leaky = create(name, fit_data="train").fit(restricted)  # every row: the defect
    pool_test = np.isin(bench.pool_positions_, bench.test_idx_)
    ood = leaky.score(bench.pool_activations_.restrict_classes(np.arange(5)))[pool_test]
    id_scores = leaky.score(bench.id_activations_)
    leaky_auroc = roc_auc_score(np.r_[np.ones(len(id_scores)), np.zeros(len(ood))], np.r_[id_scores, ood])
    assert leaky_auroc < 0.75 < rows["auroc"].mean()


def test_id_classes_need_labelled_fit_data() -> None:
    fit, id_test, pool = _class_split()
    fit.labels = np.full(len(fit), -1)
    bench = CoodBenchmark(id_test, pool, window=1, n_levels=5, id_classes=range(5))
    with pytest.raises(InvalidInputError, match="carry no class labels"):
        bench.run(None, [create("knn")], fit_activations=fit)


def _memmapped(acts: Activations, folder) -> Activations:
    """``acts`` with logits and labels as read-only memory-mapped .npy files (as the cache holds)."""
    for name in ("logits", "labels"):
        np.save(folder / f"{name}.npy", getattr(acts, name))
    return Activations(logits=np.load(folder / "logits.npy", mmap_mode="r"),
                       labels=np.load(folder / "labels.npy", mmap_mode="r"), ids=acts.ids)


@pytest.mark.parametrize("id_classes", [None, [0, 2, 3]])
def test_the_pool_is_scored_block_by_block(monkeypatch, tmp_path, id_classes) -> None:
    """Small blocks (7 rows) of a memory-mapped pool, each restricted on the fly, give the
    numbers of one block holding the whole (restricted) pool."""
    rng = np.random.default_rng(5)
    id_labels = rng.choice([0, 2, 3] if id_classes else 5, 200)
    id_acts = Activations(logits=rng.normal(size=(200, 5)), labels=id_labels,
                          ids=np.arange(200).astype(str))
    pool_labels, shift = _pool(30, 8, rng)
    pool_logits = rng.normal(size=(pool_labels.size, 5)) + shift[(pool_labels - 1000) // 7, None]
    pool = _memmapped(Activations(logits=pool_logits, labels=pool_labels,
                                  ids=np.arange(pool_labels.size).astype(str)), tmp_path)
    detectors = [create("msp"), create("energy"), create("gen", M=3)]

    def run(block: int) -> pd.DataFrame:
        monkeypatch.setattr(cood, "POOL_BLOCK", block)
        return CoodBenchmark(id_acts, pool, window=6, n_levels=4, id_classes=id_classes).run(
            None, detectors)

    streamed, whole = run(7), run(10**6)
    pd.testing.assert_frame_equal(streamed, whole)
    if id_classes is not None:  # the same as restricting the whole pool first
        pool_logits = np.asarray(pool.logits)[:, id_classes]  # pool labels are pool class ids
        restricted = CoodBenchmark(id_acts.restrict_classes(id_classes),
                                   Activations(logits=pool_logits, labels=pool.labels, ids=pool.ids),
                                   window=6, n_levels=4)
        expected = restricted.run(None, detectors)
        cols = ["detector", "level", "auroc", "fpr95_id", "n_ood", "severity", "ood_mean_kappa"]
        pd.testing.assert_frame_equal(streamed[cols], expected[cols])
