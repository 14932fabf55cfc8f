"""MOOD's ID statistics as the official code computes them: the recipe's
``evaluation.fit_transform`` (the training augmentation), written by ``reproduce`` as the
experiment's ``[id] fit_transform``, and a check of ``published compare``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from torchvision import transforms as T

from oodbench.cli.main import main
from oodbench.errors import ConfigError
from oodbench.models.fit_transforms import FIT_TRANSFORMS
from oodbench.published.catalogue import load
from oodbench.published.compare import row_checks, with_fit_transforms
from oodbench.published.recipes import parse_recipe_file, recipe
from oodbench.run.experiment import load_experiment
from oodbench.run.plan import make_plan
from oodbench.schema import loads_toml

MOOD_SPEC = "timm:beit_large_patch16_224"  # the recipe states no spec (MOOD's own fine-tune)


class _Model:
    """A stand-in whose eval transform normalises as MOOD's BEiT does (0.5, 0.5, 0.5)."""

    transform = T.Compose([T.Resize(248), T.CenterCrop(224), T.ToTensor(),
                           T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])


def test_moods_recipe_reads_the_fit_data_with_the_official_training_transform() -> None:
    """MOODv1/eval_with_features.py:226 and 240: the ID statistics are the training set's
    features through build_dataset(is_train=True) -> datasets.py:326-345, timm's
    create_transform(is_training=True, ...) with eval_with_features.py:105-123's defaults and
    the Inception mean and std (datasets.py:321-324); re-stated here from the official code."""
    from timm.data import IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD, create_transform

    setting = recipe("mood-beit-l").section("evaluation")["fit_transform"]
    assert setting.value == "mood_train"
    assert "eval_with_features.py:226" in setting.source and ":240" in setting.source
    official = create_transform(
        input_size=224, is_training=True, color_jitter=0.4, auto_augment="rand-m9-mstd0.5-inc1",
        interpolation="bicubic", re_prob=0.25, re_mode="pixel", re_count=1,
        mean=IMAGENET_INCEPTION_MEAN, std=IMAGENET_INCEPTION_STD)
    ours = FIT_TRANSFORMS[setting.value].transform(_Model())
    assert repr(ours) == repr(official)  # every operation and parameter, in order


def test_a_recipe_naming_an_unknown_fit_transform_is_refused() -> None:
    text = """
family = "x"
title = "t"
paper = "p"
[recipes.a]
rows = [{ table = "imagenet1k-vs-sun", method = "MOOD" }]
model = { spec = { value = "unknown", source = "s" } }
preprocessing = {}
detector = { name = { value = "mood", source = "s" } }
evaluation = { benchmark = { value = "mos-imagenet", source = "s" }, metrics = { value = ["auroc"], source = "s" }, fit_transform = { value = "train", source = "s" } }
"""
    with pytest.raises(ConfigError, match="unknown fit transform 'train'.*mood_train"):
        parse_recipe_file(text, "x.toml")
    ok = parse_recipe_file(text.replace('value = "train"', 'value = "unknown"'), "x.toml")
    assert not ok.recipes["a"].evaluation.fit_transform.known  # type: ignore[union-attr]


def test_reproduce_dry_run_writes_moods_fit_transform(tmp_path: Path) -> None:
    """MOOD trains (its recipe's fine-tuning): the training config reads a stand-in ImageNet
    training folder, which the experiment's [id] fit reads too, with MOOD's augmentation."""
    out, root = tmp_path / "out", tmp_path / "data"
    train = root / "id_data" / "ILSVRC-2012" / "train"  # run/reproduce.py TRAIN_FOLDERS
    for i, wnid in enumerate(("n01440764", "n01443537")):
        (train / wnid).mkdir(parents=True)
        Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)).save(train / wnid / "a.png")
    result = CliRunner().invoke(main, [
        "published", "reproduce", "imagenet1k-vs-sun", "--recipe", "mood-beit-l", "--out",
        str(out), "--data-root", str(root), "--model", MOOD_SPEC, "--random-init",
        "--dry-run"], terminal_width=200)
    assert result.exit_code == 2, result.output  # the benchmark's data is missing
    written = loads_toml((out / "experiment.toml").read_text(), origin="experiment.toml")
    assert written["id"]["fit_transform"] == "mood_train"
    assert written["id"]["fit"] == {"folder": str(train)}
    exp = load_experiment(out / "experiment.toml", check_paths=False)
    (cell,) = make_plan(exp).cells
    assert (cell.detector, cell.config.fit_data, cell.fit_transform_used) == (
        "mood", "train", "mood_train")
    assert "fit on train read with mood_train" in result.output  # the plan printed
    record = loads_toml((out / "reproduce.toml").read_text(), origin="reproduce.toml")
    assert not [d for d in record.get("differences", [])
                if d["setting"] == "evaluation.fit_transform"]


def _mood_row() -> dict[str, str]:
    rows = with_fit_transforms(load("imagenet1k-vs-sun"))
    return rows[(rows["method"] == "MOOD") & (rows["metric"] == "auroc")].iloc[0].to_dict()


def _yours(**over: str) -> dict[str, str]:
    row = {"model": MOOD_SPEC, "detector": "mood", "hyperparams": "{}",
           "benchmark": "mos-imagenet", "group": "sun", "metric": "auroc", "fit_data": "train",
           "tuning": ""}
    row.update(over)
    return row


@pytest.mark.parametrize(("yours", "status"), [
    ("mood_train", "same"), ("eval", "differs"), ("", "unknown")])
def test_compare_checks_the_fit_transform_the_recipe_states(yours: str, status: str) -> None:
    published = _mood_row()
    assert published["fit_transform"] == "mood_train"
    (check,) = [c for c in row_checks(published, _yours(fit_transform=yours))
                if c.item == "fit data transform"]
    assert check.status == status and check.published == "mood_train"


def test_compare_checks_a_fit_transform_only_where_one_side_names_one() -> None:
    rows = with_fit_transforms(load("imagenet1k-vs-sun"))
    react = rows[rows["method"] == "ReAct (ResNet-50)"].iloc[0].to_dict()
    assert react["fit_transform"] == ""
    mine = _yours(detector="react")
    assert "fit data transform" not in {c.item for c in row_checks(react, {**mine,
                                                                          "fit_transform": "eval"})}
    (check,) = [c for c in row_checks(react, {**mine, "fit_transform": "mood_train"})
                if c.item == "fit data transform"]
    assert (check.status, check.published) == ("unknown", "not stated")


def test_published_compare_names_the_fit_transform_as_a_difference() -> None:
    import pandas as pd

    from oodbench import published

    rows = pd.DataFrame([{**_yours(fit_transform=t), "value": 0.9, "status": "ok"}
                         for t in ("eval", "mood_train")])
    compared = published.compare(rows, tables_=["imagenet1k-vs-sun"])
    assert compared["published_method"].tolist() == ["MOOD", "MOOD"]
    read_eval, read_train = compared["differs"].str.split("; ").tolist()
    assert "fit data transform" in read_eval and "fit data transform" not in read_train
    assert "fit data transform: published mood_train; yours eval" in compared["comparison"][0]
