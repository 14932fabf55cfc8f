"""Recipes as data: every published row of the four leaderboards points to one recipe, each
recipe agrees with its rows, the published defaults are the official values, and a malformed
recipe file is a clear error."""

from __future__ import annotations

import pandas as pd
import pytest

from oodbench import published
from oodbench.benchmarks.files import builtin_paths
from oodbench.detectors import available, preset_for
from oodbench.errors import ConfigError
from oodbench.published.recipes import (
    SECTIONS,
    UNKNOWN,
    coverage,
    parse_recipe_file,
    recipe,
    recipes,
    row_recipes,
)

#: table -> the rows every one of which has a recipe (the C-OOD table: ViT-L/32-384's)
COVERED = {
    "imagenet1k-vs-sun": lambda rows: rows,
    "imagenet1k-resnet50-tuning": lambda rows: rows,
    "imagenet1k-ood-losses": lambda rows: rows,
    "cood": lambda rows: rows[rows["backbone"] == "vit_large_patch32_384"],
}


@pytest.mark.parametrize("table", list(COVERED))
def test_every_row_of_the_four_tables_points_to_one_recipe(table: str) -> None:
    rows = published.load(table)
    wanted = COVERED[table](rows)
    ids = row_recipes(rows)
    assert (ids[wanted.index] != "").all()
    assert coverage(table) == (len(wanted), len(rows))


def test_the_families_cover_each_tables_methods() -> None:
    """vs SUN: 22 methods; tuning: 5 detectors x 3 protocols; losses: 5 x 3; C-OOD: 4 kappas."""
    def n_recipes(table: str) -> int:
        return len({r for r in row_recipes(published.load(table)) if r})

    assert published.load("imagenet1k-vs-sun")["method"].nunique() == 22
    assert n_recipes("imagenet1k-vs-sun") == 22
    assert n_recipes("imagenet1k-resnet50-tuning") == 5 * 3
    assert n_recipes("imagenet1k-ood-losses") == 5 * 3
    assert n_recipes("cood") == 4


def test_every_recipe_has_rows() -> None:
    assert set(row_recipes(published.load_all())) - {""} == set(recipes())


def _stated(value: str) -> bool:
    return value not in ("", UNKNOWN)


def test_each_recipe_agrees_with_its_rows() -> None:
    """What a row states (detector, preset, tuning protocol, benchmark, fit data, weights) is
    what its recipe says; a recipe's names are oodbench's (detector, preset, benchmark)."""
    rows = published.load_all()
    ids = row_recipes(rows)
    detectors = {d["name"] for d in available()}
    benchmarks = {*builtin_paths(), "cood"}
    for rid, group in rows[ids != ""].groupby(ids[ids != ""]):
        r = recipe(rid)
        name, preset = r.value("detector", "name"), r.value("detector", "preset")
        if name is not None:
            assert name in detectors, rid
            if preset:
                preset_for(name, preset)  # raises for a preset the detector lacks
        bench = r.value("evaluation", "benchmark")
        assert bench is None or bench in benchmarks, rid
        tuning = r.value("evaluation", "tuning")
        protocol = tuning["protocol"] if isinstance(tuning, dict) else tuning
        for row in group.to_dict(orient="records"):
            for column, value in (("detector", name), ("preset", preset), ("benchmark", bench),
                                  ("tuning", protocol), ("fit_data", r.value("evaluation",
                                                                             "fit_data"))):
                if _stated(row[column]) and value is not None:
                    assert row[column] == value, (rid, column)
            specs = [w for w in row["weights"].split(";") if w]
            if specs and r.value("model", "spec") is not None:
                assert r.value("model", "spec") in specs, rid


def test_every_value_carries_its_source() -> None:
    for r in recipes().values():
        for section in SECTIONS:
            for key, setting in r.section(section).items():
                assert setting.source.strip(), (r.id, section, key)


# -- the published defaults, each against the official value it cites ---------------------------
def test_cma_recipe_is_the_official_code() -> None:
    r = recipe("cma-vit-b16-neglabel")
    assert [r.value("training", k) for k in ("optimizer", "lr", "weight_decay", "batch_size",
                                              "epochs", "precision")] == \
        ["adamw", 1e-5, 0.1, 512, 10, "fp32"]
    assert r.value("training", "augmentation") == \
        "RandomResizedCrop(224, scale=(0.9, 1.0), bicubic)"
    assert r.value("detector", "hyperparams") == {
        "n_groups": 1, "temperature": 0.01, "positive_prompt": "The nice {}",
        "negatives": "Neglabel/neg_label_10000.npy"}
    assert "utils/train_utils.py:23" in r.section("training")["weight_decay"].source
    assert r.value("model", "spec") == "clip:ViT-B-16-quickgelu/openai"


def test_npos_recipe_is_the_official_code() -> None:
    r = recipe("npos-clip-b16-mcm")
    assert (r.value("training", "weight_decay"), r.value("training", "batch_size"),
            r.value("training", "epochs")) == (1e-4, 1000, 100)
    assert r.value("training", "loss_params")["start_epoch"] == 40
    assert "18 ImageNet templates" in r.value("training", "prompts")
    assert "train_npos.py:46" in r.section("training")["weight_decay"].source


def test_mood_and_doe_recipes() -> None:
    mood = recipe("mood-beit-l")
    assert mood.value("preprocessing", "crop_fraction") == 0.875
    assert "datasets.py:210-211" in mood.section("preprocessing")["crop_fraction"].source
    doe = recipe("doe")
    assert doe.value("model", "released") is False  # CIFAR checkpoints only
    assert doe.value("training", "loss_params") == {"average": 0.6}


def test_the_tuning_papers_rows_are_its_own_protocol() -> None:
    """The tuning paper's Algorithms 1-4 are oodbench's held_out_paper, not held_out_classes."""
    rows = published.load("imagenet1k-resnet50-tuning")
    assert set(rows["tuning"]) == {"held_out_paper", "ood_val", "synthetic_ood_val"}
    r = recipe("tuning-react-held-out-paper")
    assert r.value("evaluation", "tuning")["protocol"] == "held_out_paper"


# -- malformed files ---------------------------------------------------------------------------
GOOD = """
family = "x"
title = "t"
paper = "p"
[recipes.a]
rows = [{ table = "imagenet1k-vs-sun", method = "SHE" }]
model = { spec = { value = "timm:resnet50", source = "s" } }
preprocessing = {}
detector = { name = { value = "she", source = "s" } }
evaluation = { benchmark = { value = "mos-imagenet", source = "s" }, metrics = { value = ["auroc"], source = "s" } }
"""


def test_a_good_file_parses_and_unknown_is_kept_as_unknown() -> None:
    parsed = parse_recipe_file(GOOD.replace('value = "timm:resnet50"', 'value = "unknown"'), "x.toml")
    assert not parsed.recipes["a"].model.spec.known  # type: ignore[union-attr]


@pytest.mark.parametrize(("edit", "message"), [
    (('source = "s" } }\npreprocessing', 'source = "" } }\npreprocessing'), "needs its source"),
    (("preprocessing = {}", "preprocessing = { crop = { value = 1, source = \"s\" } }"), "crop"),
    (('rows = [{ table = "imagenet1k-vs-sun", method = "SHE" }]', "rows = []"),
     "at least one row selector"),
    (('method = "SHE"', 'methd = "SHE"'), "methd"),
    (("[recipes.a]", "[recipes.a]\nbase = \"b\""), "base 'b' is not a recipe"),
    (('detector = { name = { value = "she", source = "s" } }', "detector = {}"),
     "needs `name`"),
])
def test_a_malformed_file_is_a_clear_error(edit: tuple[str, str], message: str) -> None:
    old, new = edit
    assert old in GOOD
    with pytest.raises(ConfigError, match=message) as err:
        parse_recipe_file(GOOD.replace(old, new), "family.toml")
    assert "family.toml" in str(err.value)


def test_a_row_two_recipes_claim_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from oodbench.published import recipes as module

    both = {**recipes(), "twin": module.Recipe("twin", "x", "x.toml", "p", "",
                                                recipe("she").entry)}
    monkeypatch.setattr(module, "recipes", lambda: both)
    with pytest.raises(ConfigError, match="claimed by the recipes 'she' and 'twin'"):
        row_recipes(pd.DataFrame([{"table": "imagenet1k-vs-sun", "method": "SHE"}]))


def test_a_training_recipe_is_its_losss_default():
    """A method's published recipe is also what ``train(loss=...)`` runs without settings
    (``oodbench.train.method_defaults``): every stated optimiser value of a recipe that trains
    with a loss that has published defaults equals that default."""
    from oodbench.published.recipes import recipes
    from oodbench.train.method_defaults import RECIPES

    checked: set[str] = set()
    for r in recipes().values():
        loss = r.value("training", "loss") if r.trains else None
        if loss not in RECIPES:
            continue
        optim = RECIPES[loss].optim
        for key in ("lr", "weight_decay", "batch_size", "epochs", "optimizer"):
            stated = r.value("training", key)
            if stated is not None:
                assert stated == getattr(optim, key), (r.id, key, stated, getattr(optim, key))
                checked.add(loss)
    assert {"cma", "npos"} <= checked  # the recipes that state their optimiser
