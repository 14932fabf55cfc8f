"""OodSetsBenchmark: per-set metrics and OpenOOD's unweighted near/far/all means, checked against
scikit-learn and scores computed here from the logits (softmax, log-sum-exp)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp, softmax
from sklearn.metrics import roc_auc_score

from oodbench.benchmarks.standard import OodSetsBenchmark, mean_rows, split_indices
from oodbench.detectors import create
from oodbench.errors import (
    ClassCountMismatchError,
    EmptyInputError,
    InvalidInputError,
)
from oodbench.extract.activations import Activations
from tests._tolerance import assert_within, auroc_slack
from tests.detectors._reference import energy_error, msp_error

C = 5


def acts(logits: np.ndarray, labels: np.ndarray | None = None, name: str = "set",
         features: bool = False) -> Activations:
    n = len(logits)
    rng = np.random.default_rng(len(name))
    return Activations(
        logits=logits.astype(np.float32),
        labels=np.full(n, -1, dtype=np.int64) if labels is None else labels,
        ids=np.asarray([f"{name}/{i:04d}.png" for i in range(n)]),
        features=rng.normal(size=(n, 4)).astype(np.float32) if features else None,
        meta={"source": name},
    )


@pytest.fixture(scope="module")
def sets() -> dict[str, Activations]:
    """ID: confident logits; OOD sets from trivially separable to heavily overlapping."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, C, size=300)
    id_logits = rng.normal(size=(300, C))
    id_logits[np.arange(300), labels] += rng.uniform(1.0, 6.0, size=300)
    id_logits[:30] = rng.normal(size=(30, C))  # some ID samples are unsure (and often wrong)
    out = {"id": acts(id_logits, labels, "id")}
    out["flat"] = acts(np.zeros((40, C)), name="flat")  # MSP = 1/C: below every ID sample
    for name, n, boost in (("near_a", 120, 3.0), ("near_b", 60, 1.5), ("far_b", 200, 0.5)):
        logits = rng.normal(size=(n, C))
        logits[np.arange(n), rng.integers(0, C, size=n)] += rng.uniform(0, boost, size=n)
        out[name] = acts(logits, name=name)
    return out


KINDS = {"near_a": "near", "near_b": "near", "flat": "far", "far_b": "far"}


def msp(a: Activations) -> np.ndarray:
    return softmax(np.asarray(a.logits, dtype=np.float64), axis=1).max(axis=1)


def energy(a: Activations) -> np.ndarray:
    return logsumexp(np.asarray(a.logits, dtype=np.float64), axis=1)


#: the rounding bound of each restated score against the detectors' float32 exps
BOUNDS = {"msp": msp_error, "energy": energy_error}


def slack(detector: str, id_acts: Activations, ood_acts: Activations) -> float:
    """How far the benchmark's AUROC may be from scikit-learn's on the float64 restatement:
    the share of (ID, OOD) pairs within the scores' rounding bounds (``auroc_slack``; none on
    these sets, so 1e-12)."""
    score, bound = {"msp": msp, "energy": energy}[detector], BOUNDS[detector]
    return auroc_slack(score(id_acts), score(ood_acts), bound(id_acts.logits), bound(ood_acts.logits))


def sk_auroc(id_scores: np.ndarray, ood_scores: np.ndarray) -> float:
    y = np.r_[np.ones(id_scores.size), np.zeros(ood_scores.size)]
    return float(roc_auc_score(y, np.r_[id_scores, ood_scores]))


@pytest.fixture(scope="module")
def table(sets: dict[str, Activations]) -> pd.DataFrame:
    ood = {g: sets[g] for g in KINDS}
    bench = OodSetsBenchmark(sets["id"], ood, kinds=KINDS, name="synthetic")
    return bench.run(None, [create("msp"), create("energy")])


def test_rows_and_columns(table: pd.DataFrame) -> None:
    per_detector = ["near_a", "near_b", "flat", "far_b", "near", "far", "all"]
    assert table["group"].tolist() == per_detector * 2
    assert table["detector"].tolist() == ["msp"] * 7 + ["energy"] * 7
    assert table["is_average"].tolist() == ([False] * 4 + [True] * 3) * 2
    assert table["kind"].tolist()[:7] == ["near", "near", "far", "far", "near", "far", "all"]
    for key in ("auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out", "ap_in", "ap_out",
                "id_accuracy", "id_auroc", "aurc", "n_id", "n_ood", "hyperparams"):
        assert key in table.columns


def test_a_perfect_detector_scores_auroc_one(table: pd.DataFrame, sets: dict[str, Activations]) -> None:
    assert msp(sets["flat"]).max() < msp(sets["id"]).min()  # the premise: fully separable
    row = table[(table.detector == "msp") & (table.group == "flat")].iloc[0]
    assert row.auroc == 1.0 and row.fpr95_id == 0.0 and row.fpr95_ood == 0.0
    assert row.aupr_in == pytest.approx(1.0) and row.aupr_out == pytest.approx(1.0)


@pytest.mark.parametrize("detector, score", [("msp", msp), ("energy", energy)])
def test_per_set_auroc_and_id_metrics_match_sklearn(
    table: pd.DataFrame, sets: dict[str, Activations], detector: str, score
) -> None:
    id_scores = score(sets["id"])
    rows = table[(table.detector == detector) & ~table.is_average].set_index("group")
    for group in KINDS:
        # the benchmark's float32 exps may only swap pairs within their rounding bounds
        assert rows.loc[group, "auroc"] == pytest.approx(
            sk_auroc(id_scores, score(sets[group])), abs=slack(detector, sets["id"], sets[group]))
        assert rows.loc[group, "n_ood"] == len(sets[group]) and rows.loc[group, "n_id"] == 300
        # a mean of scores each within its bound
        assert rows.loc[group, "ood_mean_kappa"] == pytest.approx(
            score(sets[group]).mean(), rel=1e-12, abs=BOUNDS[detector](sets[group].logits).max())
    id_acts = sets["id"]
    correct = np.asarray(id_acts.logits).argmax(1) == np.asarray(id_acts.labels)
    assert rows["id_accuracy"].unique() == pytest.approx([correct.mean()])
    bound = BOUNDS[detector](id_acts.logits)
    id_slack = auroc_slack(id_scores[correct], id_scores[~correct], bound[correct], bound[~correct])
    assert rows["id_auroc"].iloc[0] == pytest.approx(roc_auc_score(correct, id_scores), abs=id_slack)


@pytest.mark.parametrize("detector, score", [("msp", msp), ("energy", energy)])
def test_near_far_all_are_unweighted_means_of_the_sets(
    table: pd.DataFrame, sets: dict[str, Activations], detector: str, score
) -> None:
    id_scores = score(sets["id"])
    auroc = {g: sk_auroc(id_scores, score(sets[g])) for g in KINDS}
    tol = {g: slack(detector, sets["id"], sets[g]) for g in KINDS}  # as above, per set
    rows = table[table.detector == detector].set_index("group")
    near = (auroc["near_a"] + auroc["near_b"]) / 2  # 120 and 60 images: each set counts once
    far = (auroc["flat"] + auroc["far_b"]) / 2
    everything = sum(auroc.values()) / 4
    assert rows.loc["near", "auroc"] == pytest.approx(near, abs=(tol["near_a"] + tol["near_b"]) / 2)
    assert rows.loc["far", "auroc"] == pytest.approx(far, abs=(tol["flat"] + tol["far_b"]) / 2)
    assert rows.loc["all", "auroc"] == pytest.approx(everything, abs=sum(tol.values()) / 4)
    weighted = (120 * auroc["near_a"] + 60 * auroc["near_b"]) / 180
    assert abs(near - weighted) > 1e-3  # the test can tell unweighted from weighted means
    for metric in ("fpr95_id", "fpr95_ood", "aupr_in", "aupr_out", "ap_in"):
        assert rows.loc["near", metric] == pytest.approx(
            (rows.loc["near_a", metric] + rows.loc["near_b", metric]) / 2
        )
    assert rows.loc["near", "n_ood"] == 180 and rows.loc["all", "n_ood"] == 420
    assert rows.loc["far", "id_accuracy"] == rows.loc["flat", "id_accuracy"]


def test_sets_without_kind_enter_only_all(sets: dict[str, Activations]) -> None:
    bench = OodSetsBenchmark(sets["id"], {"a": sets["near_a"], "b": sets["far_b"]},
                             kinds={"a": "near", "b": ""})
    out = bench.run(None, [create("msp")])
    assert out["group"].tolist() == ["a", "b", "near", "all"]
    assert out["kind"].tolist() == ["near", "", "near", "all"]
    single = OodSetsBenchmark(sets["id"], {"a": sets["near_a"]}).run(None, [create("msp")])
    assert single["group"].tolist() == ["a"]  # one set and no kind: nothing to average
    none = OodSetsBenchmark(sets["id"], {"a": sets["near_a"], "b": sets["far_b"]},
                            kinds={"a": "near", "b": "far"}, aggregate="none")
    assert none.run(None, [create("msp")])["group"].tolist() == ["a", "b"]


def test_mean_rows_directly() -> None:
    base = {"detector": "d", "hyperparams": "{}", "is_average": False, "n_id": 10}
    sets = [
        {**base, "group": "x", "kind": "near", "n_ood": 5, "auroc": 0.5, "id_auroc": float("nan")},
        {**base, "group": "y", "kind": "near", "n_ood": 7, "auroc": 0.9, "id_auroc": float("nan")},
    ]
    near, everything = mean_rows(sets)
    assert near["group"] == "near" and near["auroc"] == pytest.approx(0.7) and near["n_ood"] == 12
    assert np.isnan(near["id_auroc"]) and everything["group"] == "all"


def test_unlabelled_id_set_has_no_id_metrics(sets: dict[str, Activations]) -> None:
    unlabelled = acts(np.asarray(sets["id"].logits), name="u")
    out = OodSetsBenchmark(unlabelled, {"a": sets["flat"]}).run(None, [create("msp")])
    assert "id_accuracy" not in out.columns and out["auroc"].iloc[0] == 1.0


def test_id_split_by_ids_and_positions(sets: dict[str, Activations]) -> None:
    id_acts = sets["id"]
    picked = ["imagenet_1k/val/id/0003.png", "0001.png"]  # matched by base name
    assert split_indices(id_acts, picked).tolist() == [3, 1]
    bench = OodSetsBenchmark(id_acts, {"a": sets["flat"]}, id_split=np.arange(100))
    assert bench.run(None, [create("msp")])["n_id"].iloc[0] == 100
    with pytest.raises(InvalidInputError, match="not samples of the ID test set"):
        OodSetsBenchmark(id_acts, {"a": sets["flat"]}, id_split=["nope.png"])
    with pytest.raises(InvalidInputError, match="positions"):
        OodSetsBenchmark(id_acts, {"a": sets["flat"]}, id_split=[300])


def test_detectors_that_need_training_statistics(sets: dict[str, Activations]) -> None:
    rng = np.random.default_rng(3)
    id_f = acts(np.asarray(sets["id"].logits), np.asarray(sets["id"].labels), "id", features=True)
    ood_f = acts(np.asarray(sets["far_b"].logits), name="far_b", features=True)
    train = acts(rng.normal(size=(50, C)), rng.integers(0, C, size=50), "train", features=True)
    for a, axis in ((id_f, 0), (train, 0), (ood_f, 1)):  # ID/train and OOD point different ways
        a.features[:, axis] += 5.0
    bench = OodSetsBenchmark(id_f, {"shifted": ood_f})
    with pytest.raises(InvalidInputError, match="fit_activations"):
        bench.run(None, [create("knn", k=5)])
    knn = create("knn", k=5)
    out = bench.run(None, [knn], fit_activations=train)
    # the same detector's scores in this process: the same ranks, ~1e-16 of float64 rounding
    assert out["auroc"].iloc[0] == pytest.approx(sk_auroc(knn.score(id_f), knn.score(ood_f)), abs=1e-9)
    assert out["auroc"].iloc[0] > 0.9


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"ood": {}}, EmptyInputError, "at least one"),
        ({"ood": {"near": None}}, InvalidInputError, "must be a Source or Activations"),
        ({"kinds": {"a": "middle"}}, InvalidInputError, "'near' or 'far'"),
        ({"kinds": {"zzz": "near"}}, InvalidInputError, "not OOD sets"),
        ({"headline": ["auc"]}, InvalidInputError, "headline"),
        ({"aggregate": "median"}, InvalidInputError, "aggregate"),
    ],
)
def test_invalid_construction(sets: dict[str, Activations], kwargs, error, message) -> None:
    args = {"ood": {"a": sets["flat"]}, **kwargs}
    with pytest.raises(error, match=message):
        OodSetsBenchmark(sets["id"], **args)


def test_reserved_names_and_run_errors(sets: dict[str, Activations]) -> None:
    with pytest.raises(InvalidInputError, match="average rows"):
        OodSetsBenchmark(sets["id"], {"all": sets["flat"]})
    bench = OodSetsBenchmark(sets["id"], {"a": sets["flat"]})
    with pytest.raises(InvalidInputError, match="at least one detector"):
        bench.run(None, [])
    too_few = acts(np.asarray(sets["id"].logits)[:, :3], np.asarray(sets["id"].labels), "id3")
    with pytest.raises(ClassCountMismatchError):
        OodSetsBenchmark(too_few, {"a": acts(np.zeros((3, 3)))}).run(None, [create("msp")])
    from oodbench.data import DigitsSource

    with pytest.raises(InvalidInputError, match="pass a model"):
        OodSetsBenchmark(DigitsSource(), {"a": sets["flat"]}).run(None, [create("msp")])


# -- end to end on the real reference images (ImageNet val as ID, CIFAR-10 test as OOD) --------
def test_real_images_through_extract(imagenet_val_1300: Path, cifar10_test: Path) -> None:
    import torch

    from oodbench.data import ImageFolder
    from oodbench.data.imagenet_val import ImageNetVal
    from oodbench.models.small_cnn import SmallCNN

    id_source = ImageNetVal(imagenet_val_1300).subset(np.arange(0, 1300, 50))  # 26 images
    ood_source = ImageFolder(cifar10_test).subset(np.arange(0, 10_000, 400))  # 25 images
    model = SmallCNN(1000, width=8, seed=0)  # random weights: only the plumbing is tested
    bench = OodSetsBenchmark(id_source, {"cifar10": ood_source}, kinds={"cifar10": "far"})
    out = bench.run(model, [create("msp")], device="cpu", num_workers=0, progress=False)

    def direct(source) -> np.ndarray:
        with torch.no_grad():
            x = torch.stack([model.transform(source.load(i)) for i in range(len(source))])
            return torch.softmax(model.logits(x).double(), dim=1).max(dim=1).values.numpy()

    row = out[out.group == "cifar10"].iloc[0]
    assert row.n_id == 26 and row.n_ood == 25
    # random weights give near-uniform softmaxes (MSP ~ 1/1000): some ID and OOD scores are
    # 1.3e-7 apart, as close as the benchmark's float32 rounding (another batching of the
    # network, float32 exps; measured up to 1.3e-7 relative). Pairs within 1e-6 relative may
    # swap: 2 of 650 here, so the AUROCs agree to 0.003, not to 1e-6
    id_direct, ood_direct = direct(id_source), direct(ood_source)
    tol = auroc_slack(id_direct, ood_direct, 1e-6 * id_direct, 1e-6 * ood_direct)
    assert row.auroc == pytest.approx(sk_auroc(id_direct, ood_direct), abs=tol)
    assert out["group"].tolist() == ["cifar10", "far"]


def test_run_keeps_the_scores_behind_its_rows(sets: dict[str, Activations]) -> None:
    ood = {g: sets[g] for g in KINDS}
    bench = OodSetsBenchmark(sets["id"], ood, kinds=KINDS)
    scores = bench.measure(None, [create("msp"), create("energy")]).scores
    assert set(scores) == {("msp", "{}"), ("energy", '{"temperature": 1.0}')}
    id_scores, groups = scores[("msp", "{}")]
    # float32 exps, float64 result (oodbench.compute): within the rounding bound of the
    # all-float64 maths
    assert_within(id_scores, msp(sets["id"]), msp_error(sets["id"].logits))
    assert set(groups) == set(KINDS)
    for group in KINDS:
        assert_within(groups[group], msp(sets[group]), msp_error(sets[group].logits))


def test_rows_carry_delong_intervals_and_optional_bootstrap(
    table: pd.DataFrame, sets: dict[str, Activations]
) -> None:
    from oodbench.metrics.delong import auroc_ci

    sets_rows = table[~table.is_average]
    row = sets_rows[(sets_rows.detector == "msp") & (sets_rows.group == "near_a")].iloc[0]
    iv = auroc_ci(msp(sets["id"]), msp(sets["near_a"]))
    assert (row.auroc_ci_low, row.auroc_ci_high) == pytest.approx((iv.low, iv.high))
    averages = table[table.is_average]
    assert averages[["auroc_ci_low", "auroc_ci_high"]].isna().all().all()  # no mean of bounds
    assert "fpr95_id_ci_low" not in table.columns  # bootstrap is off by default
    bench = OodSetsBenchmark(sets["id"], {"a": sets["near_a"]})
    bench.n_bootstrap = 50
    boot = bench.run(None, [create("msp")])
    assert boot["fpr95_id_ci_low"].iloc[0] <= boot["fpr95_id"].iloc[0] <= boot["fpr95_id_ci_high"].iloc[0]
