"""``oodbench published reproduce``: a row's recipe written as an experiment (and its training
config), the data checked against the catalogue, and the result compared with the row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from oodbench import published
from oodbench.cli.main import main
from oodbench.detectors import preset_for
from oodbench.published.recipes import Recipe, recipe
from oodbench.run.experiment import load_experiment
from oodbench.run.plan import make_plan
from oodbench.run.reproduce import DEFAULTS, DETECTOR_FILES, reproduction
from oodbench.schema import loads_toml


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


def _reproduce(table: str, rid: str, out: Path, root: Path, *extra: str):
    return _invoke("published", "reproduce", table, "--recipe", rid, "--out", str(out),
                   "--data-root", str(root), *extra)


def _image(path: Path, seed: int, size: int = 8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _negatives(root: Path, relative: str) -> Path:
    """A stand-in negative-prompt list where the recipe reads CMA's (three prompts)."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.array(["The nice stone", "The nice cloud", "This is a rope photo"]))
    return path


def _train_folder(root: Path, folder: str) -> None:
    """A stand-in ImageNet training folder: two wnid class folders of one image each."""
    for i, wnid in enumerate(("n01440764", "n01443537")):
        _image(root / folder / wnid / "a.png", i)


def _checkpoint(r: Recipe, root: Path) -> None:
    """A stand-in where the recipe reads its released checkpoint (``model.file``): planning
    records the file's digest; nothing loads it."""
    file = r.value("model", "file")
    if file:
        (root / file).parent.mkdir(parents=True)
        (root / file).write_bytes(b"a stand-in: only its digest is read")


def _expected_hyperparams(r: Recipe, not_applied: set[str]) -> dict[str, Any]:
    """The detector configuration a recipe names: its preset's values, then its own (those
    the detector does not take are named differences instead)."""
    preset = r.value("detector", "preset", "")
    name = r.value("detector", "name", DEFAULTS["detector.name"])
    wanted = dict(preset_for(name, preset).hyperparams) if preset else {}
    wanted.update(r.value("detector", "hyperparams", {}))
    return {k: v for k, v in wanted.items() if f"detector.hyperparams.{k}" not in not_applied}


def _check_plan(r: Recipe, out: Path, named: set[str], root: Path | None = None) -> None:
    """The plan of the written experiment names exactly the recipe's model, detector (name,
    preset, hyper-parameters or tuning protocol), fit data and benchmark; where the recipe says
    "unknown", oodbench's documented default (``named``: the settings named as differences)."""
    exp = load_experiment(out / "experiment.toml", check_paths=False)
    (cell,) = make_plan(exp).cells
    file = r.value("model", "file")
    if r.trains and file is None:  # the model of the training config, from the recipe's spec
        assert cell.model.train == (out / "train.toml").resolve()
    else:
        assert cell.model.spec == r.value("model", "spec") and cell.model.pretrained
    if file is not None:  # the released checkpoint below the data root, the head's size
        assert root is not None and cell.model.weights == root / file
        assert cell.model.num_classes == r.value("model", "num_classes")
        assert not (out / "train.toml").exists()
    assert cell.benchmark.name == r.value("evaluation", "benchmark",
                                          DEFAULTS["evaluation.benchmark"])
    config = cell.config
    assert config.name == r.value("detector", "name", DEFAULTS["detector.name"])
    assert config.preset == r.value("detector", "preset", DEFAULTS["detector.preset"])
    for setting in ("evaluation.benchmark", "detector.name", "detector.preset"):
        assert (setting in named) == (setting in r.unknown())
    tuning = r.value("evaluation", "tuning")
    if isinstance(tuning, dict):
        for key, value in tuning.items():  # protocol, space, search and the protocol's own
            assert cell.tune[key] == value, key
    else:
        assert not cell.tune
        for key, value in _expected_hyperparams(r, named).items():
            if key in DETECTOR_FILES:  # a file, read below the data root
                assert root is not None and config.hyperparams[key] == str(root / value)
                continue
            assert config.hyperparams[key] == value, key
    fit = r.value("evaluation", "fit_data")
    if fit in ("train", "id_val"):
        assert config.fits_on(fit)
    assert (exp.id_fit is not None) == (fit == "train" or isinstance(tuning, dict))
    assert (exp.id_val is not None) == (fit == "id_val" or (isinstance(tuning, dict) and
                                                           tuning["protocol"] == "ood_val"))


# one recipe per row family: post-hoc on released weights, a training method, the tuning table's
# four protocols, the loss table, the C-OOD rows
FAMILIES = [
    ("imagenet1k-vs-sun", "scale-resnet50"),
    ("imagenet1k-vs-sun", "mcm-clip-b16"),
    ("imagenet1k-vs-sun", "cma-vit-b16-neglabel"),
    ("imagenet1k-vs-sun", "npos-clip-b16-mcm"),
    ("imagenet1k-resnet50-tuning", "tuning-react-ood-val"),
    ("imagenet1k-resnet50-tuning", "tuning-knn-held-out-paper"),
    ("imagenet1k-resnet50-tuning", "tuning-plf-noise"),
    ("imagenet1k-resnet50-tuning", "tuning-ash-b-fgsm"),
    ("imagenet1k-ood-losses", "loss-logitnorm-resnet50"),
    ("cood", "cood-vit-l32-384-odin"),
    # rows on released checkpoints oodbench's bit:, supcon:, mmcls: and timm:beit_* families read
    ("imagenet1k-vs-sun", "gradnorm-bit"),
    ("imagenet1k-vs-sun", "mos-bit"),
    ("imagenet1k-vs-sun", "knn-supcon-resnet50"),
    ("imagenet1k-vs-sun", "rp-gradnorm-resnet101-lt"),
    ("imagenet1k-vs-sun", "mood-beit-l"),
]


@pytest.mark.parametrize(("table", "rid"), FAMILIES)
def test_dry_run_writes_the_recipes_settings(tmp_path: Path, table: str, rid: str) -> None:
    r = recipe(rid)
    root, out = tmp_path / "data", tmp_path / "out"
    if r.trains and r.value("model", "file") is None:  # the training config names its data
        repro = reproduction(table, recipe_id=rid, data_root=root)
        _train_folder(root, str(Path(repro.train["data"]["train"]["folder"]).relative_to(root)))
    negatives = (r.value("detector", "hyperparams") or {}).get("negatives")
    if negatives:  # a file the detector reads when the plan makes it
        _negatives(root, negatives)
    _checkpoint(r, root)
    result = _reproduce(table, rid, out, root, "--dry-run")
    assert result.exit_code == 2, result.output  # the benchmark's data is missing
    assert "dataset(s) are not under" in result.output
    record = loads_toml((out / "reproduce.toml").read_text(), origin="reproduce.toml")
    assert record["reproduce"]["recipe"] == rid
    # every unknown setting of the recipe is a named difference
    named = {d["setting"] for d in record.get("differences", [])}
    _check_plan(r, out, named, root)
    assert set(r.unknown()) - {"model.weights", "model.released"} <= named
    if (out / "train.toml").exists():
        from oodbench.train.config import read_train_config

        train = read_train_config(out / "train.toml").train
        assert train.loss == r.value("training", "loss", "ce")
        for key in ("lr", "weight_decay", "batch_size", "epochs"):
            wanted = r.value("training", key)
            if wanted is not None:
                assert getattr(train, key) == wanted, key
            else:
                assert f"training.{key}" in named
        params = r.value("training", "loss_params", {})
        assert train.loss_options == params


def test_cma_training_config_is_the_official_recipe(tmp_path: Path) -> None:
    """CMA's published recipe (ma-kjh/CMA-OoDD): AdamW lr 1e-5, weight decay 0.1, batch 512,
    10 epochs, fp32 (amp off); the augmentation and the fixed negative list are named as
    settings oodbench's files do not apply."""
    root = tmp_path / "data"
    _train_folder(root, "id_data/ILSVRC-2012/train")
    repro = reproduction("imagenet1k-vs-sun", "CMA(ViT-B/16, NegLabel)", data_root=root)
    train = repro.train["train"]
    assert (train["optimizer"], train["lr"], train["weight_decay"], train["batch_size"],
            train["epochs"], train["amp"]) == ("adamw", 1e-5, 0.1, 512, 10, "off")
    assert train["loss_options"] == {"lam": 0.001, "train_prompt": "a photo of a {}",
                                     "warmup_steps": 500}
    negatives = root / "Neglabel" / "neg_label_10000.npy"  # below the data root
    assert repro.experiment["detectors"] == [{
        "name": "neglabel", "preset": "paper",
        "hyperparams": {"n_groups": 1, "temperature": 0.01, "positive_prompt": "The nice {}",
                        "negatives": str(negatives)}}]
    # applied, so no named difference: the negative list (neglabel's `negatives`), the
    # augmentation and the training prompt (CMA's published defaults, train/method_defaults.py)
    named = {d.setting: d for d in repro.differences}
    assert not {"detector.hyperparams.negatives", "training.augmentation",
                "training.prompts", "training.warmup"} & set(named)
    from oodbench.train.method_defaults import defaults_for

    aug = defaults_for("cma").augmentation
    assert aug is not None and (aug.scale, aug.interpolation) == ((0.9, 1.0), "bicubic")
    # a missing list is listed with the datasets, with where to take it from
    result = _reproduce("imagenet1k-vs-sun", "cma-vit-b16-neglabel", tmp_path / "out", root,
                        "--dry-run")
    assert result.exit_code == 2
    line = next(x for x in result.output.splitlines() if "neg_label_10000.npy (" in x)
    assert f"expected at {negatives}" in line and "github.com/ma-kjh/CMA-OoDD" in line
    _negatives(root, "Neglabel/neg_label_10000.npy")
    again = _reproduce("imagenet1k-vs-sun", "cma-vit-b16-neglabel", tmp_path / "out2", root,
                       "--dry-run")
    assert "neg_label_10000.npy (" not in again.output and "plan: " in again.output


def test_missing_data_is_one_message_with_each_datasets_commands(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _reproduce("imagenet1k-vs-sun", "scale-resnet50", out, tmp_path / "none")
    assert result.exit_code == 2
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "5 dataset(s) are not under" in line)
    listed = lines[start + 1:start + 6]
    for dataset in ("imagenet-1k-val", "mos-inaturalist", "mos-sun", "mos-places", "dtd"):
        (line,) = [x for x in listed if x.strip().startswith(f"{dataset} (")]
        assert f"oodbench data info {dataset}" in line
    # those with a public download name the download command too; ImageNet has none
    sun = next(x for x in listed if x.strip().startswith("mos-sun ("))
    assert f"expected at {tmp_path / 'none' / 'ood_data' / 'SUN'}" in sun
    assert "oodbench data download mos-sun DIR" in sun
    assert "download" not in next(x for x in listed if "imagenet-1k-val (" in x)
    assert (out / "experiment.toml").is_file() and (out / "reproduce.toml").is_file()


def test_a_row_without_loadable_weights_says_so(tmp_path: Path) -> None:
    result = _reproduce("imagenet1k-vs-sun", "doe", tmp_path / "out", tmp_path / "data")
    assert result.exit_code == 2
    assert "its weights were never released" in result.output and "--model SPEC" in result.output


def test_a_released_checkpoint_is_read_below_the_data_root(tmp_path: Path) -> None:
    """MOS's group-softmax checkpoint: the experiment loads it with the bit: family and its
    1000 + 8 outputs from the recipe's path below the data root; missing, it is listed with
    where to download it; --weights of the same file name is that file, not an override."""
    r = recipe("mos-bit")
    root, out = tmp_path / "data", tmp_path / "out"
    result = _reproduce("imagenet1k-vs-sun", "mos-bit", out, root, "--dry-run")
    assert result.exit_code == 2
    checkpoint = root / r.value("model", "file")
    line = next(x for x in result.output.splitlines()
                if "BiT-S-R101x1-group-finetune.pth.tar (model weights)" in x)
    assert f"expected at {checkpoint}" in line
    assert "pages.cs.wisc.edu/~huangrui/finetuned_model/BiT-S-R101x1-group-finetune" in line
    # the head's class groups: the official list that fixed its layout, below the data root
    groups = next(x for x in result.output.splitlines()
                  if "imagenet2012_group_softmax_val_list.txt (the official class-group" in x)
    assert f"expected at {root / 'data_lists'}" in groups
    assert "github.com/deeplearning-wisc/large_scale_ood" in groups
    model = loads_toml((out / "experiment.toml").read_text(), origin="x")["models"][0]
    assert model == {"spec": "bit:BiT-S-R101x1", "weights": str(checkpoint), "num_classes": 1008,
                     "name": "bit:BiT-S-R101x1 + BiT-S-R101x1-group-finetune.pth.tar"}
    rows = published.load("imagenet1k-vs-sun")
    assert set(rows[rows["method"] == "MOS (BiT-S-R101x1)"]["weights"]) == {model["name"]}
    elsewhere = tmp_path / "downloads" / checkpoint.name
    same = reproduction("imagenet1k-vs-sun", recipe_id="mos-bit", data_root=root,
                        weights=elsewhere)
    assert same.experiment["models"][0]["weights"] == str(elsewhere)
    assert "model.weights" not in {d.setting for d in same.differences}
    other = reproduction("imagenet1k-vs-sun", recipe_id="mos-bit", data_root=root,
                         weights=tmp_path / "mine.pth.tar")
    assert [d.why for d in other.differences if d.setting == "model.weights"] == [
        "override --weights"]


def _mos_stand_in(root: Path) -> None:
    """MOS's dataset/ layout (benchmarks/specs/mos-imagenet.toml) with a few 8-pixel images:
    ImageNet validation images in two wnid folders, one image per OOD set (Textures' in a
    class folder, as DTD's)."""
    val = root / "id_data" / "ILSVRC-2012" / "val"
    for i, wnid in enumerate(("n01440764", "n01443537")):
        _image(val / wnid / f"ILSVRC2012_val_0000000{i + 1}.png", i)
    for i, folder in enumerate(("iNaturalist/images", "SUN/images", "Places/images",
                                "dtd/images/banded")):
        _image(root / "ood_data" / folder / "x.png", 10 + i)


def test_end_to_end_with_stand_ins_differs_only_in_the_weights(tmp_path: Path) -> None:
    """SCALE's row reproduced on a stand-in MOS tree with the row's ResNet-50 at random init:
    the comparison names the weights as the one setting that differs (and the stand-in ID
    set's size, the table's protocol, which no stand-in of a few images can have)."""
    root, out = tmp_path / "data", tmp_path / "out"
    _mos_stand_in(root)
    result = _reproduce("imagenet1k-vs-sun", "scale-resnet50", out, root, "--random-init",
                        "--no-progress")
    assert result.exit_code == 0, result.output
    compared = _invoke("published", "compare", str(out), "--table", "imagenet1k-vs-sun",
                       "--format", "json")
    assert compared.exit_code == 0, compared.output
    metrics = recipe("scale-resnet50").value("evaluation", "metrics")  # the row's two values
    sun = [r for r in json.loads(compared.output) if r["group"] == "sun" and r["metric"] in metrics]
    assert sorted(r["metric"] for r in sun) == sorted(metrics)
    for row in sun:
        assert row["published_method"] == "SCALE (ResNet50)"
        assert row["differs"] == "backbone and weights; ID test images (ImageNet-1k validation)"
        assert "yours timm:resnet50.tv_in1k (random init)" in row["comparison"]
        assert "published 50,000; yours 2" in row["comparison"]


@pytest.mark.parametrize(("table", "rid"), [("imagenet1k-vs-sun", "scale-resnet50"),
                                           ("imagenet1k-vs-sun", "mcm-clip-b16"),
                                           ("imagenet1k-vs-sun", "rankfeat-bit"),
                                           ("imagenet1k-vs-sun", "knn-supcon-resnet50")])
def test_compare_calls_the_reproduced_row_same_settings(tmp_path: Path, table: str,
                                                         rid: str) -> None:
    """A result with the written plan's settings (as a run of it at full size records them:
    its cell's model, detector configuration, benchmark, fit data) and the row's ID set size
    is the row's like for like: "same settings", the published value beside it."""
    import pandas as pd

    from oodbench.published.recipes import row_recipes
    from oodbench.results.table import ResultsTable

    rows = published.load(table)
    (value,) = rows[(row_recipes(rows) == rid) & (rows["metric"] == "auroc")]["value"]
    group, n_id = "sun", published.table_info(table).protocol["n_id"]
    out = tmp_path / "out"
    _checkpoint(recipe(rid), tmp_path / "data")
    _reproduce(table, rid, out, tmp_path / "data", "--dry-run")
    (cell,) = make_plan(load_experiment(out / "experiment.toml", check_paths=False)).cells
    published_value = float(value) / 100.0
    row = {"model": cell.model.name, "detector": cell.detector,
           "hyperparams": json.dumps(dict(cell.hyperparams)), "benchmark": cell.benchmark.name,
           "group": group, "metric": "auroc", "value": published_value, "n_id": n_id,
           "preset": cell.preset, "fit_data": cell.config.fit_data if cell.config.fits_on_data
           else "none", "tuning": "", "status": "ok", "cell": cell.key,
           "time": "2026-01-01T00:00:00"}
    ResultsTable(out).append(pd.DataFrame([row]))
    result = _invoke("published", "compare", str(out), "--table", table, "--format", "json")
    assert result.exit_code == 0, result.output
    (shown,) = json.loads(result.output)
    assert (shown["comparison"], shown["published"]) == ("same settings", value)
    assert shown["published_method"] in {r["method"] for r in recipe(rid).entry.rows}
    table_view = _invoke("published", "compare", str(out), "--table", table, "--format", "table")
    assert f"same settings, published {value} %" in table_view.output
    assert f"reproduced from recipe {rid}" in table_view.output
