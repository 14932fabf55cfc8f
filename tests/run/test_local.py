"""The local executor on the tiny experiment: end to end, re-runs, failures, skipped cells."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

import oodbench
from oodbench.detectors import base as detector_base
from oodbench.detectors.base import Detector
from oodbench.models.small_cnn import SmallCNN
from oodbench.results.table import COLUMNS, ResultsTable
from oodbench.run.build import build_source, load_model
from oodbench.run.checks import ExperimentCheckError
from oodbench.run.experiment import parse_experiment
from tests._tolerance import auroc_slack
from tests.run.tiny import n_images, write_tiny_experiment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SOURCES = ("id_train", "id_test", "pool", "noise", "stripes")


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    return write_tiny_experiment(tmp_path)


@pytest.fixture
def forward_images(monkeypatch) -> list[int]:
    """The batch sizes of every extraction forward pass (``forward_all``) of SmallCNN."""
    sizes: list[int] = []
    original = SmallCNN.forward_all

    def counted(self, x, capture=("logits", "features")):
        sizes.append(int(x.shape[0]))
        return original(self, x, capture)

    monkeypatch.setattr(SmallCNN, "forward_all", counted)
    return sizes


def independent_msp(folder: Path) -> np.ndarray:
    """MSP of the tiny model on an ImageFolder tree, computed without oodbench's pipeline."""
    from PIL import Image

    model = SmallCNN(3, seed=0).eval()
    files = sorted(p for p in folder.rglob("*.png"))  # class folders sorted, then files
    x = torch.stack([model.transform(Image.open(f).convert("RGB")) for f in files])
    with torch.no_grad():
        return torch.softmax(model(x).double(), dim=1).max(dim=1).values.numpy()


def test_tiny_experiment_end_to_end(tiny, forward_images):
    df = oodbench.run_experiment(tiny, progress=False)
    assert list(df.columns) == list(COLUMNS)
    cells = df.drop_duplicates("cell")
    # msp, energy, knn k=1, knn k=3, mc_dropout x (cood, sets)
    assert len(cells) == 10 and cells["status"].eq("ok").all(), cells[["detector", "error"]]
    # each (model, source) pair is one forward pass: every image of the 5 sources exactly once
    assert sum(forward_images) == sum(n_images(s) for s in SOURCES)
    cood = df[(df["benchmark"] == "cood") & (df["metric"] == "auroc")]
    assert sorted(set(cood["group"])) == ["level_0", "level_1"]
    assert sorted(set(cood["level"].astype(int))) == [0, 1]
    sets = df[(df["benchmark"] == "sets") & (df["metric"] == "auroc")]
    assert dict(zip(sets["group"], sets["kind"])) == {"noise": "far", "stripes": "near"}
    assert sets["n_id"].eq(n_images("id_test")).all() and sets["n_ood"].eq(6).all()

    # the stored numbers agree with an independent computation of MSP and sklearn's AUROC
    out = tiny.parent / "out"
    msp = cells[(cells["detector"] == "msp") & (cells["benchmark"] == "sets")]["cell"].item()
    id_scores, groups = ResultsTable(out).load_scores(msp)
    data = tiny.parent / "data"
    # float32 passes in other batches and float32 exps against a float64 softmax: ~1e-7
    # relative; 1e-5 leaves 100 times that
    id_ref = independent_msp(data / "id_test")
    np.testing.assert_allclose(id_scores, id_ref, rtol=1e-5)
    np.testing.assert_allclose(groups["noise"], independent_msp(data / "noise"), rtol=1e-5)
    for group in ("noise", "stripes"):
        ref = independent_msp(data / group)
        expected = roc_auc_score(np.r_[np.ones(id_scores.size), np.zeros(ref.size)],
                                 np.r_[id_ref, ref])
        got = df[(df["cell"] == msp) & (df["group"] == group) & (df["metric"] == "auroc")]["value"]
        # scores within 1e-5 relative (as above) may swap only pairs that close
        assert got.item() == pytest.approx(expected, abs=auroc_slack(id_ref, ref, 1e-5 * id_ref, 1e-5 * ref))
    # C-OOD score arrays: one per level, 2 test images per pool class (25 % of 8)
    cood_cell = cells[(cells["detector"] == "msp") & (cells["benchmark"] == "cood")]["cell"].item()
    _, levels = ResultsTable(out).load_scores(cood_cell)
    assert list(levels) == ["level_0", "level_1"] and all(v.size == 2 for v in levels.values())
    assert (out / "experiment.toml").read_text() == tiny.read_text()
    assert (out / "experiment.json").exists()
    # the long table pivots to one row per (model, detector configuration, benchmark, group)
    wide = oodbench.results.wide(df)
    assert len(wide) == 5 * (2 + 2)  # 5 detector configurations x (2 levels + 2 OOD sets)
    row = wide[(wide["detector"] == "msp") & (wide["group"] == "noise")]
    assert row["auroc"].item() == df[(df["cell"] == msp) & (df["group"] == "noise")
                                     & (df["metric"] == "auroc")]["value"].item()


def test_an_ood_group_may_be_a_flat_folder(tiny):
    """Issue 23 item 2: ``groups.x = { folder = ".../cifar10-test/cat" }``, a folder of images
    without class folders, was refused ("has no class sub-folders")."""
    import shutil

    data = tiny.parent / "data"
    (data / "flat").mkdir()
    for i, image in enumerate(sorted((data / "noise").rglob("*.png"))):
        shutil.copy(image, data / "flat" / f"n{i}.png")
    text = tiny.read_text().replace('groups.stripes = { folder = "data/stripes", kind = "near" }',
                                    'groups.stripes = { folder = "data/flat", kind = "near" }')
    text = text.replace('grid = { k = [1, 3] }', "")
    tiny.write_text(text.split("[[detectors]]")[0] + '[[detectors]]\nname = "msp"\n')
    df = oodbench.run_experiment(tiny, progress=False)
    sets = df[(df["benchmark"] == "sets") & (df["metric"] == "auroc")]
    assert df["status"].eq("ok").all()
    # the same images, flat or in a class folder, give the same AUROC
    assert set(sets["group"]) == {"noise", "stripes"} and sets["n_ood"].eq(6).all()
    assert sets["value"].nunique() == 1


def test_a_rerun_skips_finished_cells(tiny, forward_images):
    first = oodbench.run_experiment(tiny, progress=False)
    passes = len(forward_images)
    assert passes > 0
    stored = len(ResultsTable(tiny.parent / "out").read(latest=False))
    second = oodbench.run_experiment(tiny, progress=False)
    assert len(forward_images) == passes  # no forward pass at all
    assert len(ResultsTable(tiny.parent / "out").read(latest=False)) == stored  # no new rows
    key = ["cell", "group", "metric"]
    a = first.sort_values(key).reset_index(drop=True)
    b = second.sort_values(key).reset_index(drop=True)
    assert a[[*key, "value", "time"]].equals(b[[*key, "value", "time"]])


@dataclass
class Boom(Detector):
    """A detector that always fails (for the failure-isolation test)."""

    name = "boom_test"
    requires = frozenset({"logits"})
    calls = 0

    def _score(self, acts):
        type(self).calls += 1
        raise ValueError("boom: this detector always fails")


def tiny_data(tiny: Path, detectors: list) -> dict:
    data = tomllib.loads(tiny.read_text())
    data["detectors"] = detectors
    return data


def test_a_failing_cell_is_recorded_and_the_rest_goes_on(tiny, monkeypatch):
    monkeypatch.setitem(detector_base._REGISTRY, "boom_test", Boom)
    monkeypatch.setattr(Boom, "calls", 0)
    exp = parse_experiment(tiny_data(tiny, ["boom_test", "msp"]), base_dir=tiny.parent)
    df = oodbench.run_experiment(exp, progress=False)
    status = df.drop_duplicates("cell").set_index(["detector", "benchmark"])["status"]
    assert status.to_dict() == {("boom_test", "cood"): "failed", ("boom_test", "sets"): "failed",
                                ("msp", "cood"): "ok", ("msp", "sets"): "ok"}
    errors = df.loc[df["status"] == "failed", "error"]
    assert errors.eq("ValueError: boom: this detector always fails").all()
    log = (tiny.parent / "out" / "failures.log").read_text()
    assert "Traceback" in log and "boom_test" in log
    # a re-run retries the failed cells only
    calls = Boom.calls
    oodbench.run_experiment(exp, progress=False)
    assert Boom.calls == calls + 2
    assert ResultsTable(tiny.parent / "out").finished_cells() == set(
        df.loc[df["status"] == "ok", "cell"])


def test_detectors_that_do_not_apply_are_skipped_with_the_reason(tiny):
    data = tiny_data(tiny, ["knn", "msp"])
    del data["id"]["fit"]
    df = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    knn = df[df["detector"] == "knn"]
    assert knn["status"].eq("skipped").all() and len(knn) == 2
    assert "add [id] fit" in knn["error"].iloc[0]
    assert df.loc[df["detector"] == "msp", "status"].eq("ok").all()


def test_problems_are_found_before_the_first_forward_pass(tiny, forward_images):
    """An unloadable model, an empty OOD folder and a default C-OOD window larger than the pool
    are reported together, before any extraction, instead of as failed cells afterwards."""
    data = tiny_data(tiny, ["msp", {"name": "knn", "hyperparams": {"k": 1}}])
    data["models"].append({"name": "broken", "factory": "oodbench.models.small_cnn:SmallCNN",
                           "options": {"num_classes": 1}})  # SmallCNN needs >= 2 classes
    del data["benchmarks"][0]["window"]  # default: 3 ID classes per level, the pool has 2
    (tiny.parent / "data" / "empty" / "class_a").mkdir(parents=True)
    data["benchmarks"][1]["groups"]["noise"]["folder"] = "data/empty"
    exp = parse_experiment(data, base_dir=tiny.parent)
    with pytest.raises(ExperimentCheckError) as err:
        oodbench.run_experiment(exp, progress=False)
    message = str(err.value)
    assert "3 problems; nothing was extracted" in message
    assert "benchmark 'sets': EmptyInputError: OOD folder" in message and "data/empty" in message
    assert "model 'broken': InvalidInputError: SmallCNN needs at least 2 classes" in message
    assert ("model 'small_cnn' on benchmark 'cood': InvalidInputError: the default window is the "
            "number of ID classes, 3: window=3 is larger than the 2 OOD classes") in message
    assert forward_images == []  # no forward pass
    assert not (tiny.parent / "cache").exists() and not (tiny.parent / "out" / "results").exists()


def test_labels_beyond_the_model_classes_are_found_up_front(tiny, forward_images):
    data = tiny_data(tiny, ["msp"])
    data["id"]["test"] = {"folder": "data/id_test", "label_map": {"a": 0, "b": 1, "c": 7}}
    with pytest.raises(ExperimentCheckError, match=r"model 'small_cnn' on \[id\].test: "
                       r"ClassCountMismatchError: source 'id_test' has labels up to 7"):
        oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    assert forward_images == []


def test_the_checks_look_only_at_the_cells_left_to_run(tiny):
    data = tiny_data(tiny, ["msp"])
    exp = parse_experiment(data, base_dir=tiny.parent)
    oodbench.run_experiment(exp, progress=False)
    import shutil

    shutil.rmtree(tiny.parent / "data" / "noise")  # finished cells need no data
    again = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent, check_paths=False),
                                    progress=False)
    assert again["status"].eq("ok").all()


def write_openood_cifar10(root: Path) -> None:
    """A miniature of OpenOOD's CIFAR-10 data folder: its image lists and a few images each."""
    from PIL import Image

    from oodbench.benchmarks import spec

    rng = np.random.default_rng(0)
    bench = spec("openood-v1.5-cifar10")
    sets = [bench.id, bench.id_val, bench.ood_val, *bench.ood]
    for i, s in enumerate(sets):
        lines = []
        for j in range(4):
            rel = f"set{i}/{j}.png"
            path = root / s.images / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((rng.random((8, 8)) * 255).astype(np.uint8)).convert("RGB").save(path)
            lines.append(f"{rel} {j % 10 if s in (bench.id, bench.id_val) else -1}")
        (root / s.list).parent.mkdir(parents=True, exist_ok=True)
        (root / s.list).write_text("\n".join(lines) + "\n")


def test_a_named_standard_benchmark_runs_with_data_relative_to_the_file(tiny):
    write_openood_cifar10(tiny.parent / "openood")
    data = tiny_data(tiny, ["msp"])
    data["models"][0]["options"] = {"num_classes": 10, "seed": 0}
    data["benchmarks"] = [{"type": "standard", "name": "openood-v1.5-cifar10",
                           "options": {"root": "openood"}}]
    df = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    assert df["status"].eq("ok").all(), df["error"].unique()
    auroc = df[df["metric"] == "auroc"]
    assert set(auroc["group"]) == {"cifar100", "tin", "mnist", "svhn", "texture", "places365"}
    assert dict(zip(auroc["group"], auroc["kind"]))["cifar100"] == "near"
    assert auroc["n_ood"].eq(4).all() and auroc["n_id"].eq(4).all()


def test_presets_and_the_id_val_role_reach_the_rows(tiny):
    """``[experiment].protocol`` and a detector's own ``protocol`` pick presets; detectors that
    fit on ID-val data are fitted on ``[id] val`` (skipped with the reason without it); every
    row records the preset and the fit data."""
    from oodbench.detectors import create
    from oodbench.extract import extract

    data = tiny_data(tiny, ["react", {"name": "knn", "hyperparams": {"k": 2}, "protocol": ""}, "klm"])
    data["experiment"]["protocol"] = "openood"
    del data["benchmarks"][0]  # the named sets are enough here
    without_val = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    react = without_val[without_val["detector"] == "react"]
    assert react["status"].eq("skipped").all() and "add [id] val" in react["error"].iloc[0]

    data["id"]["val"] = {"folder": "data/id_train"}
    data["experiment"]["output"] = "out-val"
    exp = parse_experiment(data, base_dir=tiny.parent)
    with pytest.warns(UserWarning, match="never predicted"):  # KL-matching on 24 ID-val images
        df = oodbench.run_experiment(exp, progress=False)
    ok = df[df["status"] == "ok"]
    cells = ok.drop_duplicates("detector").set_index("detector")
    assert cells.loc["react", "preset"] == "openood" and cells.loc["react", "fit_data"] == "id_val"
    assert cells.loc["klm", "preset"] == "openood" and cells.loc["klm", "fit_data"] == "id_val"
    assert cells.loc["knn", "preset"] == "" and cells.loc["knn", "fit_data"] == "train"

    # react's threshold comes from [id] val: the stored scores are those of a fit on it
    model = load_model(exp.models[0])
    options = {"capture": ("features", "logits"), "progress": False, "device": "cpu"}
    val = extract(model, build_source(exp.id_val), **options)
    id_test = extract(model, build_source(exp.id_test), **options)
    det = create("react", preset="openood").fit(None, id_val=val)
    react_cell = ok.loc[ok["detector"] == "react", "cell"].iloc[0]
    id_scores, _ = ResultsTable(tiny.parent / "out-val").load_scores(react_cell)
    np.testing.assert_allclose(id_scores, det.score(id_test), rtol=1e-12)  # the same code, this process


def test_a_label_map_sets_the_id_labels_of_the_accuracy(tiny):
    """ID accuracy is computed against the labels the experiment gives (here a label map), not
    the folders' sorted positions."""
    from PIL import Image

    data = tiny_data(tiny, ["msp"])
    data["benchmarks"] = data["benchmarks"][1:]  # the named OOD sets
    mapping = {"a": 1, "b": 1, "c": 2}  # two folders may be one model class
    data["id"]["test"] = {"folder": "data/id_test", "label_map": mapping}
    df = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    accuracy = df[df["metric"] == "id_accuracy"]["value"].unique()
    model = SmallCNN(3, seed=0).eval()
    files = sorted((tiny.parent / "data" / "id_test").rglob("*.png"))
    x = torch.stack([model.transform(Image.open(f).convert("RGB")) for f in files])
    with torch.no_grad():
        predicted = model(x).argmax(1).numpy()
    labels = np.array([mapping[f.parent.name] for f in files])
    assert accuracy.tolist() == [pytest.approx(float((predicted == labels).mean()))]
    assert (predicted == labels).mean() != (predicted == np.array(["abc".index(f.parent.name)
                                                                     for f in files])).mean()


def test_unreadable_images_are_kept_with_the_results_and_named_in_the_report(tiny):
    from oodbench.extract import SkippedImagesWarning
    from oodbench.results.report import write_report

    (tiny.parent / "data" / "noise" / "noise" / "zz_broken.png").write_bytes(b"not a png")
    data = tiny_data(tiny, ["msp", "energy"])
    with pytest.warns(SkippedImagesWarning, match="zz_broken.png"):
        df = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    assert df["status"].eq("ok").all()
    out = tiny.parent / "out"
    (entry,) = ResultsTable(out).skipped_images().values()
    assert entry["source"] == "noise" and entry["n_source"] == n_images("noise") + 1
    assert [r["id"] for r in entry["skipped"]] == ["noise/zz_broken.png"]
    files = write_report(out)
    html, markdown = files.html.read_text(), files.markdown.read_text()
    assert "Unreadable images (skipped; absent from every number above)" in html
    assert "noise/zz_broken.png" in html and "unreadable images skipped" in html
    assert f"- noise: 1 of {n_images('noise') + 1} images skipped: noise/zz_broken.png (" in markdown


def test_the_checked_first_model_is_not_loaded_twice(tiny, monkeypatch):
    from oodbench.run import build

    loads = []
    real = build.load_model
    monkeypatch.setattr(build, "load_model", lambda spec: loads.append(spec.name) or real(spec))
    data = tiny_data(tiny, ["msp"])
    data["models"].append({**data["models"][0], "name": "second"})
    oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    assert loads == ["small_cnn", "second", "second"]  # checks load both; the run only the second


def test_rows_carry_intervals_and_bootstrap_from_the_file(tiny):
    data = tiny_data(tiny, ["msp"])
    data["benchmarks"][1]["n_bootstrap"] = 100
    df = oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    ok = df[df["status"] == "ok"]
    auroc = ok[ok["metric"] == "auroc"]
    assert auroc["ci_low"].notna().all() and (auroc["ci_low"] <= auroc["value"]).all()
    fpr = ok[ok["metric"] == "fpr95_id"]
    assert fpr[fpr["benchmark"] == "sets"]["ci_high"].notna().all()  # bootstrap asked for
    assert fpr[fpr["benchmark"] == "cood"]["ci_high"].isna().all()  # not asked for


def test_each_warning_of_a_run_is_shown_once_with_its_count():
    """Issue 34: a warning every cell raises (a large k, corrupt images, chance-level accuracy)
    printed once per cell; the run shows each once, with how many cells raised it."""
    from oodbench.run.local import CellResult, WarningTally

    tally = WarningTally()
    for i in range(3):
        raised = ((UserWarning, "every cell"),) + (((RuntimeWarning, "one cell"),) if i == 1 else ())
        tally.add(CellResult(cell=None, rows=pd.DataFrame(), warnings=raised))  # type: ignore[arg-type]
    with pytest.warns(Warning) as caught:
        tally.show()
    assert [(w.category, str(w.message)) for w in caught] == [
        (UserWarning, "every cell (in 3 of 3 cells)"), (RuntimeWarning, "one cell (in 1 of 3 cells)")]
