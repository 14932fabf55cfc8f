"""Experiments with ``tune = {...}`` detector entries: parsing, bad input, and a tiny run whose
rows carry the chosen hyper-parameters and how they were chosen."""

from __future__ import annotations

import shutil
import sys

import pytest

import oodbench
from oodbench.results.report import write_report
from oodbench.run.experiment import ExperimentError, parse_experiment
from oodbench.run.plan import make_plan
from tests.run.test_experiment import minimal
from tests.run.tiny import write_tiny_experiment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HELD_OUT = {"name": "react", "tune": {
    "protocol": "held_out_classes", "held_out_fraction": 0.34, "n_variants": 2,
    "train": {"epochs": 3}, "space": {"percentile": [50.0, 90.0]}}}


def with_fit(**overrides):
    return minimal(id={"test": {"digits": [0, 1, 2]}, "fit": {"digits": [0, 1, 2]}}, **overrides)


def test_tune_entries_parse_and_plan_one_cell_each():
    ood_val = {"name": "vra", "hyperparams": {"per_unit": False}, "tune": {
        "protocol": "ood_val", "ood": {"digits": [5, 6]}, "search": "tpe", "n_trials": 7,
        "space": {"lower_percentile": {"low": 0.0, "high": 50.0}, "gamma": [0.0, 0.5]}}}
    exp = parse_experiment(with_fit(detectors=["msp", HELD_OUT, ood_val]))
    react, vra = exp.detectors[1], exp.detectors[2]
    assert react.tune.protocol == "held_out_classes" and react.configurations() == [{}]
    assert react.tune.held_out == {"n_variants": 2, "held_out_fraction": 0.34, "train": {"epochs": 3},
                                   "seed": 0}
    assert vra.tune.ood.digits == (5, 6) and vra.configurations() == [{"per_unit": False}]
    assert any(where.endswith("[[detectors]] #3.tune.ood") for where, _ in exp.sources())
    plan = make_plan(exp)
    cells = {c.detector: c for c in plan.cells}
    assert len(plan.cells) == 3 and not cells["msp"].tune
    assert cells["react"].tune["protocol"] == "held_out_classes"
    assert cells["vra"].hyperparams["per_unit"] is False
    assert "features" in plan.models[0].capture
    other = parse_experiment(with_fit(detectors=["msp", {**HELD_OUT, "tune": {
        **HELD_OUT["tune"], "n_variants": 3}}, ood_val]))
    assert make_plan(other).cells[1].key != cells["react"].key  # the tune settings are in the key


@pytest.mark.parametrize("entry, message", [
    ({"name": "react", "tune": {"protocol": "ood_val", "space": {"percentile": [90.0]}}},
     r"needs ood = \{ folder"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "ood": {"digits": [5]}}}, "uses no OOD data"),
    ({"name": "react", "tune": {"protocol": "ood_val", "ood": {"digits": [5]}, "n_variants": 3,
                                "space": {"percentile": [90.0]}}}, "only go with protocol"),
    ({"name": "react", "tune": {"protocol": "no_ood", "space": {"percentile": [90.0]}}},
     "expected one of"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "space": {}}}, "search space is empty"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "space": {"k": [5]}}},
     "no hyper-parameter k; it takes fit_data, percentile"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "space": {"percentile": [90.0, 150.0]}}},
     "percentile"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "space": {"percentile": {"low": 80.0,
                                                                           "high": 99.0}}}},
     "grid search needs a list"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "held_out_fraction": 1.5}},
     r"held_out_fraction must be in \(0, 1\)"),
    ({"name": "react", "tune": {**HELD_OUT["tune"], "retrain": "everything"}}, "retrain must be"),
    ({"name": "react", "grid": {"percentile": [80.0, 90.0]}, "tune": HELD_OUT["tune"]},
     "either grid or tune"),
    ({"name": "react", "hyperparams": {"percentile": 90.0}, "tune": HELD_OUT["tune"]},
     "both hyperparams and tune.space"),
    ({"name": "all", "tune": HELD_OUT["tune"]}, "takes no hyperparams, grid or tune"),
])
def test_bad_tune_entries(entry, message):
    with pytest.raises(ExperimentError, match=message) as err:
        parse_experiment(with_fit(detectors=[entry]))
    assert "[[detectors]] #1" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_tuning_needs_the_fit_set():
    with pytest.raises(ExperimentError, match=r"\[id\]: detector\(s\) \['react'\] are tuned"):
        parse_experiment(minimal(detectors=[HELD_OUT]))


def test_tiny_experiment_with_tuned_detectors(tmp_path, monkeypatch):
    """Both protocols run inside an experiment; the rows carry the tuned hyper-parameters, the
    tuning record, and equal the numbers of oodbench.tune run by hand on the same data."""
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    toml = write_tiny_experiment(tmp_path)
    data = tomllib.loads(toml.read_text())
    data["benchmarks"] = [b for b in data["benchmarks"] if b["name"] == "sets"]
    data["detectors"] = [HELD_OUT, {"name": "knn", "tune": {
        "protocol": "ood_val", "ood": {"folder": "data/noise"}, "space": {"k": [1, 2, 4]}}}]
    exp = parse_experiment(data, base_dir=tmp_path)
    df = oodbench.run_experiment(exp, progress=False)
    cells = df.drop_duplicates("cell").set_index("detector")
    assert cells["status"].eq("ok").all(), cells["error"]
    for name in ("react", "knn"):
        tuning = cells.loc[name, "tuning"]
        chosen = cells.loc[name, "hyperparams"]
        assert {k: chosen[k] for k in tuning["best_params"]} == tuning["best_params"]
    react = cells.loc["react", "tuning"]
    assert react["protocol"] == "held_out_classes" and react["n_variants"] == 2
    knn = cells.loc["knn", "tuning"]
    assert knn["protocol"] == "ood_val" and knn["search"] == "grid"
    report = write_report(tmp_path / "out")  # the report lists both choices
    page, summary = report.html.read_text(), report.markdown.read_text()
    assert "Tuned hyper-parameters" in page and "## Tuned hyper-parameters" in summary
    for line in (f"| knn | sets | ood_val | grid | auroc | k={knn['best_params']['k']} |",
                 "| react | sets | held_out_classes | grid | auroc | percentile="):
        assert line in summary

    # the same choice by hand: [id].fit split by class, oodbench.tune on the cached activations
    from oodbench.data import ImageFolder
    from oodbench.extract import extract
    from oodbench.models.small_cnn import SmallCNN
    from oodbench.tuning.split import split_by_class

    model = SmallCNN(num_classes=3, seed=0)
    capture = make_plan(exp).models[0].capture
    fit = extract(model, ImageFolder(tmp_path / "data" / "id_train"), capture=capture,
                  device="cpu", batch_size=16, progress=False)
    noise = extract(model, ImageFolder(tmp_path / "data" / "noise"), capture=capture,
                    device="cpu", batch_size=16, progress=False)
    fit_rows, val_rows = split_by_class(fit.labels, 0)
    by_hand = oodbench.tune("knn", {"k": [1, 2, 4]}, fit.subset(val_rows), noise,
                            fit=fit.subset(fit_rows))
    assert by_hand.best_params == knn["best_params"]
    assert by_hand.best_value == pytest.approx(knn["best_value"])


def test_tuning_uses_the_id_val_set_when_given(tmp_path, monkeypatch):
    """Issue 23 item 7: with [id] val given, tuned detectors still drew their ID validation rows
    from [id].fit; they use [id] val (and fit on all of [id].fit), and the record says so."""
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    toml = write_tiny_experiment(tmp_path)
    data = tomllib.loads(toml.read_text())
    data["id"]["val"] = {"folder": "data/id_test"}  # (a stand-in for held-out ID images)
    data["benchmarks"] = [b for b in data["benchmarks"] if b["name"] == "sets"]
    data["detectors"] = [{"name": "knn", "tune": {
        "protocol": "ood_val", "ood": {"folder": "data/stripes"}, "criterion": "aurc",
        "space": {"k": [1, 2, 4]}}}]
    df = oodbench.run_experiment(parse_experiment(data, base_dir=tmp_path), progress=False)
    cell = df.drop_duplicates("cell").iloc[0]
    assert cell["status"] == "ok", cell["error"]
    record = cell["tuning"]
    assert record["id_val"] == "[id].val"

    from oodbench.data import ImageFolder, OodFolder
    from oodbench.extract import extract
    from oodbench.models.small_cnn import SmallCNN

    model, folder = SmallCNN(num_classes=3, seed=0), tmp_path / "data"
    fit, val = (extract(model, ImageFolder(folder / name), capture=("logits", "features"),
                        device="cpu", batch_size=16, progress=False)
                for name in ("id_train", "id_test"))
    stripes = extract(model, OodFolder(folder / "stripes"), capture=("logits", "features"),
                    device="cpu", batch_size=16, progress=False)
    by_hand = oodbench.tune("knn", {"k": [1, 2, 4]}, val, stripes, fit=fit, criterion="aurc")
    assert by_hand.best_params == record["best_params"]
    assert by_hand.best_value == pytest.approx(record["best_value"])
    split_val, split_fit = _fit_split(fit)
    split = oodbench.tune("knn", {"k": [1, 2, 4]}, split_val, stripes, fit=split_fit,
                          criterion="aurc")
    assert split.best_value != pytest.approx(by_hand.best_value)  # the old rule's numbers differ


def _fit_split(fit):
    from oodbench.tuning.split import split_by_class

    fit_rows, val_rows = split_by_class(fit.labels, 0)
    return fit.subset(val_rows), fit.subset(fit_rows)


PAPER = {"protocol": "held_out_paper", "space": "paper", "m_grid": [1], "n_variants": 2,
         "retrain": "head"}


@pytest.mark.parametrize("tune, message", [
    ({**PAPER, "m_grid": [0, 1]}, r"m_grid must be a non-empty list, each an integer >= 1"),
    ({**PAPER, "n_tuning_sets": 0}, r"n_tuning_sets must be an integer >= 1 \(S, .*\); got 0"),
    ({**PAPER, "space": {"k": {"low": 1, "high": 5}}}, "detector 'ash_b' has no hyper-parameter k"),
    ({**PAPER, "space": {"percentile": {"low": 50.0, "high": 120.0}}},
     r"space\['percentile'\] bound 120.0 is outside the valid range"),
    ({**PAPER, "space": {"percentile": [50.0, 101.0]}, "search": "grid"},
     r"'ash_b': percentile must be in \[0, 100\) \(a percentile, in percent\); got 101.0"),
    ({**PAPER, "search": "gpp"}, r"tune.search: expected one of 'grid', 'tpe' or 'gp'"),
    ({**PAPER, "search": "grid"}, r"space = \"paper\" holds ranges.*search = \"gp\""),
    ({**PAPER, "space": "papr"}, r"unknown named space 'papr'. Did you mean 'paper'\?"),
    ({**PAPER, "retrain": "heads"}, r"retrain must be one of .*; got 'heads'; did you mean 'head'\?"),
    ({**PAPER, "n_tuning_set": 3}, "unknown key 'n_tuning_set'; did you mean 'n_tuning_sets'"),
    ({**PAPER, "train": {"epoch": 3}}, r"unknown train option 'epoch'. Did you mean 'epochs'"
                                       r".*\(retrain='head'"),
])
def test_bad_paper_tune_entries_fail_in_one_line_at_parse_time(tune, message):
    """Issue 21: a held_out_paper entry's bad input, caught by the schema (before any data is
    read): M < 1, S = 0, a parameter the detector lacks, a bound outside a parameter's range,
    and misspelt values and keys with a did-you-mean."""
    if isinstance(tune["space"], dict):
        tune = {"search": "gp", **tune}
    with pytest.raises(ExperimentError, match=message) as err:
        parse_experiment(with_fit(detectors=[{"name": "ash_b", "tune": tune}]))
    assert "[[detectors]] #1" in str(err.value) and len(str(err.value).splitlines()) == 1


def test_paper_space_needs_a_detector_it_covers():
    with pytest.raises(ExperimentError, match="gives no search space for 'mahalanobis'"):
        parse_experiment(with_fit(detectors=[{"name": "mahalanobis", "tune": PAPER}]))


def _paper_example(folder):
    """A copy of examples/tune_paper.toml and the images it reads, under ``folder``."""
    from tests.run.tiny import EXAMPLES

    shutil.copytree(EXAMPLES / "data", folder / "data", dirs_exist_ok=True)
    shutil.copy(EXAMPLES / "tune_paper.toml", folder / "tune_paper.toml")
    return folder / "tune_paper.toml"


def test_m_grid_beyond_the_fit_classes_fails_before_any_training(tmp_path, monkeypatch):
    """Issue 21: M >= classes of [id].fit - 1 is known once [id].fit is listed, and stops the
    run (one line per problem) before any extraction or training."""
    import oodbench.train
    from oodbench.run.checks import ExperimentCheckError

    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(oodbench.train, "train_head",
                        lambda *a, **k: pytest.fail("trained before the input was checked"))
    data = tomllib.loads(_paper_example(tmp_path).read_text())
    data["detectors"][0]["tune"]["m_grid"] = [1, 2]
    with pytest.raises(ExperimentCheckError, match=r"\(ash_b\).tune on \[id\].fit: "
                       r"InvalidInputError: held_out_paper: m_grid holds M=2, but M must be an "
                       r"integer in \[1, 1\] \(fit has 3 classes"):
        oodbench.run_experiment(parse_experiment(data, base_dir=tmp_path), progress=False)
    assert not (tmp_path / "cache").exists()  # nothing extracted


def test_paper_example_runs_and_records_how_it_chose(tmp_path, monkeypatch):
    """Issue 21: examples/tune_paper.toml (held_out_paper, the paper's space, GP search) runs end
    to end; the row's tuning record names the protocol, search, space and seed, M* and every
    M's phi; the same seed on a fresh cache chooses the same phi and M*."""
    records = []
    for run in ("first", "again"):
        monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / run / "cache"))
        toml = _paper_example(tmp_path / run)
        df = oodbench.run_experiment(toml, progress=False)
        cell = df.drop_duplicates("cell").iloc[0]
        assert cell["status"] == "ok", cell["error"]
        record = cell["tuning"]
        chosen = cell["hyperparams"]
        assert chosen["percentile"] == record["best_params"]["percentile"]
        records.append(record)
    first, again = records
    assert (first["protocol"], first["search"], first["space"], first["grid"]) == (
        "held_out_paper", "gp", "paper", "paper")
    assert (first["seed"], first["sampler_seed"], first["n_trials"]) == (0, 0, 12)
    assert (first["m_grid"], first["n_variants"], first["n_tuning_sets"], first["retrain"]) == (
        [1], 2, 3, "head")
    assert first["m_star"] == 1 and [m["M"] for m in first["per_m"]] == [1]
    assert 0.0 <= first["best_params"]["percentile"] <= 99.0  # App. A's range for ASH-B
    assert first["id_val"].startswith("one image per class of [id].fit")
    for key in ("best_params", "m_star", "per_m", "best_value"):
        assert again[key] == first[key], key
