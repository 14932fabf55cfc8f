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
    """vs SUN: 22 methods; tuning: 5 detectors x 4 protocols; losses: 5 x 3; C-OOD: 4 kappas."""
    def n_recipes(table: str) -> int:
        return len({r for r in row_recipes(published.load(table)) if r})

    assert published.load("imagenet1k-vs-sun")["method"].nunique() == 22
    assert n_recipes("imagenet1k-vs-sun") == 22
    assert n_recipes("imagenet1k-resnet50-tuning") == 5 * 4
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
            specs = [w.split(" + ")[0] for w in row["weights"].split(";") if w]
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
    assert set(rows["tuning"]) == {"held_out_paper", "ood_val", "noise", "fgsm"}
    r = recipe("tuning-react-held-out-paper")
    assert r.value("evaluation", "tuning")["protocol"] == "held_out_paper"


def test_the_tuning_papers_baselines_are_its_noise_and_fgsm() -> None:
    """The Gauss. and Adv. rows of arXiv 2602.05935 Table 2 are oodbench's ``noise`` and
    ``fgsm`` protocols with the paper's levels (Sec. 4.1: mu = 128, sigma in {32, 64, 128};
    eps in {0.005, 0.01, 0.1}), searched by Bayesian optimisation (Sec. 3)."""
    rows = published.load("imagenet1k-resnet50-tuning")
    gauss = rows[rows["tuning_detail"].str.startswith("Gaussian-noise")]
    adv = rows[rows["tuning_detail"].str.startswith("FGSM")]
    assert len(gauss) == len(adv) == 25  # 5 detectors x 5 OOD sets, Table 2
    assert set(gauss["tuning"]) == {"noise"} and set(adv["tuning"]) == {"fgsm"}
    for det in ("ash-b", "knn", "plf", "react", "vra"):
        noise = recipe(f"tuning-{det}-noise").value("evaluation", "tuning")
        fgsm = recipe(f"tuning-{det}-fgsm").value("evaluation", "tuning")
        assert noise == {"protocol": "noise", "space": "paper", "search": "gp",
                         "sigmas": [32.0, 64.0, 128.0]}
        assert fgsm == {"protocol": "fgsm", "space": "paper", "search": "gp",
                        "eps": [0.005, 0.01, 0.1]}


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


# -- preprocessing read from the official code: pinned, and what `reproduce` makes of it ---------
#: the official evaluation transforms, re-stated from the code each recipe cites (a changed
#: recipe value fails): (resize, crop_fraction, interpolation, mean, std)
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
OFFICIAL_PREPROCESSING = {
    # react util/data_loader.py:32-38, knn-ood :47-53, dice ood_eval.py:92-98, ash
    # model_factory.py:23-31, LINe ood_eval.py:99-105: Resize(256), CenterCrop(224), ImageNet
    # Normalize; torchvision's Resize default is bilinear
    "posthoc-resnet50": (256, 224 / 256, "bilinear", *IMAGENET),
    # COOD_benchmarking utils/misc.py:279-285 (timm's transform of the model); the vendored timm
    # 0.4.8 vision_transformer.py:78-80 (384 px, crop_pct 1.0, mean / std 0.5), :42 (bicubic)
    "cood": (384, 1.0, "bicubic", [0.5] * 3, [0.5] * 3),
    # MCM utils/train_eval_util.py:27-34: Resize(224) (bilinear), CenterCrop(224), CLIP's Normalize
    "mcm": (224, 1.0, "bilinear", [0.48145466, 0.4578275, 0.40821073],
            [0.26862954, 0.26130258, 0.27577711]),
    # gradnorm_ood test_ood.py:19-24 (and RankFeat, MOS): Resize((480, 480)), Normalize(0.5)
    "bit": ([480, 480], 1.0, "bilinear", [0.5] * 3, [0.5] * 3),
    # class_prior test_ood.py:86-91: Resize((480, 480)), [123.675, 116.28, 103.53] / 255, ...
    "class-prior": ([480, 480], 1.0, "bilinear", [123.675 / 255, 116.28 / 255, 103.53 / 255],
                    [58.395 / 255, 57.12 / 255, 57.375 / 255]),
}
KEYS = ("resize", "crop_fraction", "interpolation", "mean", "std")


@pytest.mark.parametrize("family", list(OFFICIAL_PREPROCESSING))
def test_each_familys_preprocessing_is_its_official_transform(family: str) -> None:
    official = dict(zip(KEYS, OFFICIAL_PREPROCESSING[family]))
    members = [r for r in recipes().values() if r.family == family]
    assert members
    for r in members:
        stated = {k: r.value("preprocessing", k) for k in KEYS}
        # the recipe prints 255-divided constants to 1e-6 or better
        assert stated == {k: pytest.approx(v, rel=1e-6) if k in ("mean", "std", "crop_fraction")
                          else v for k, v in official.items()}, r.id


@pytest.mark.parametrize("rid", ["scale-resnet50", "react-resnet50", "knn-resnet50",
                                 "cood-vit-l32-384-msp", "nnguide-regnet", "gradnorm-bit",
                                 "mos-bit", "knn-supcon-resnet50", "rp-gradnorm-resnet101-lt"])
def test_reproduce_names_no_preprocessing_difference_where_the_model_config_is_the_official_one(
        rid: str) -> None:
    """For these rows the official transform is exactly what oodbench applies: the timm data
    config (no network: timm's pretrained config is local), or the preprocessing the bit:,
    supcon: and mmcls: families declare (their transforms are checked against it in
    tests/models)."""
    from oodbench.run.reproduce import model_preprocessing, preprocessing_differences

    r = recipe(rid)
    applied = model_preprocessing(r.value("model", "spec"))
    assert applied is not None
    assert preprocessing_differences(r, applied) == []


def test_nnguides_regnet_is_the_official_weights_file() -> None:
    """roomo7time/nnguide model_engines/regnet.py:13-15, 62-63: torchvision's regnet_y_16gf with
    IMAGENET1K_SWAG_E2E_V1 and its transforms; timm's spec loads the same file."""
    import timm
    from torchvision.models import RegNet_Y_16GF_Weights

    r = recipe("nnguide-regnet")
    weights = RegNet_Y_16GF_Weights.IMAGENET1K_SWAG_E2E_V1
    cfg = timm.models.get_pretrained_cfg(r.value("model", "spec").split(":", 1)[1])
    assert cfg.url == weights.url
    t = weights.transforms()
    assert (r.value("preprocessing", "resize"), r.value("preprocessing", "interpolation")) == (
        t.resize_size[0], t.interpolation.value)
    assert r.value("preprocessing", "crop_fraction") == t.crop_size[0] / t.resize_size[0]


def test_moods_preprocessing_is_the_transform_its_evaluation_builds() -> None:
    """MOODv1/datasets.py:347-361 (build_transform(is_train=False): crop_pct 224 / 256,
    Resize(int(224 / crop_pct), interpolation=3 = bicubic), CenterCrop(224), the Inception mean
    and std 0.5 unless --imagenet_default_mean_and_std), which oodbench's mood_eval_transform
    follows."""
    from oodbench.models.preprocessing import MOOD_EVAL_CROP, MOOD_INPUT_SIZE

    r = recipe("mood-beit-l")
    crop_pct = 224 / 256
    assert r.value("preprocessing", "resize") == int(224 / crop_pct) == int(
        MOOD_INPUT_SIZE / MOOD_EVAL_CROP)
    assert r.value("preprocessing", "crop_fraction") == crop_pct == MOOD_EVAL_CROP
    assert r.value("preprocessing", "interpolation") == "bicubic"
    assert r.value("preprocessing", "mean") == r.value("preprocessing", "std") == [0.5] * 3
    assert r.value("training", "precision") == "fp16"  # utils.py:735-740, DeepSpeed fp16
    assert r.value("model", "released") is True


def test_what_stays_unknown_says_why() -> None:
    """No unknown setting of a family this issue read says only "not read here": it names what
    was read and what does not state the value."""
    read = {"posthoc-resnet50", "cood", "mcm", "bit", "class-prior", "mood", "npos", "doe",
            "unleashing-mask", "tuning", "posthoc-other"}
    for r in recipes().values():
        if r.family not in read:
            continue
        for section in SECTIONS:
            for key, setting in r.section(section).items():
                if not setting.known:
                    assert "not read here" not in setting.source, (
                        r.id, section, key, setting.source)
