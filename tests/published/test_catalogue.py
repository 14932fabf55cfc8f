"""``oodbench.published``: the catalogue of published tables, values exactly as printed."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import lzma
from importlib import resources

import pandas as pd
import pytest

from oodbench import published
from oodbench.detectors import available, preset_for
from oodbench.errors import CacheError, ConfigError, UnknownNameError
from oodbench.models.registry import FAMILIES
from oodbench.published import catalogue
from oodbench.published.compare import METRIC_FAMILY, TUNING_NAMES
from tests.conftest import shared_path

#: catalogue table -> the shared leaderboard file it reproduces
LEADERBOARDS = {
    "imagenet1k-vs-sun": "imagenet1k_vs_sun.csv",
    "imagenet1k-ood-losses": "imagenet1k_ood_losses.csv",
    "imagenet1k-resnet50-tuning": "imagenet1k_resnet50_tuning.csv",
}


def test_the_catalogue_holds_the_four_tables_and_openood_full_spectrum() -> None:
    assert list(published.tables()) == ["cood", *LEADERBOARDS, "openood-v1.5-imagenet1k-fsood"]
    for name in published.tables():
        rows = published.load(name)
        assert len(rows) > 0
        assert list(rows.columns[: 1 + len(catalogue.ROW_COLUMNS)]) == ["table",
                                                                        *catalogue.ROW_COLUMNS]
        assert (rows["value"] != "").all() and (rows["read_from"] != "").all()


@pytest.mark.parametrize("name", list(LEADERBOARDS))
def test_printed_reproduces_the_shared_leaderboard_cell_for_cell(name: str) -> None:
    source = pd.read_csv(shared_path("leaderboards", LEADERBOARDS[name]), dtype=str,
                         keep_default_na=False)
    pd.testing.assert_frame_equal(published.printed(name), source)


def test_values_stay_exactly_as_printed() -> None:
    sun = published.load("imagenet1k-vs-sun")
    assert sun["value"].map(type).eq(str).all()
    cma = sun[sun["method"] == "CMA(ViT-B/16, NegLabel)"].set_index("metric")["value"]
    assert cma.to_dict() == {"auroc": "96.36", "fpr95_id": "16.84"}
    mcm = sun[(sun["method"] == "MCM (CLIP-L)") & (sun["metric"] == "fpr95_id")]
    assert mcm["value"].tolist() == ["29.00"]  # the trailing zero is kept
    # a blank cell is no row: MOOD prints no FPR95, GradNorm no AUROC
    assert sun[sun["method"] == "MOOD"]["metric"].tolist() == ["auroc"]
    assert sun[sun["method"] == "GradNorm (ResNetv2-101)"]["metric"].tolist() == ["fpr95_id"]
    tuning = published.load("imagenet1k-resnet50-tuning")
    knn = tuning[(tuning["method"] == "KNN") & (tuning["ood_set"] == "near")
                 & (tuning["tuning"] == "ood_val")]
    assert knn["value"].tolist() == ["71.1"]  # as the leaderboard prints it (the paper: 71.10)


def test_the_tuning_table_carries_table_3_far_ood_and_id_accuracy() -> None:
    rows = published.load("imagenet1k-resnet50-tuning")
    far = rows[(rows["ood_set"] == "far") & (rows["paper_table"] == "Table 3")]
    assert len(far) == 10  # five detectors x two tunings
    ash = far[far["method"] == "ASH"].set_index("tuning")["value"].to_dict()
    assert ash == {"ood_val": "95.74", "held_out_classes": "95.26"}
    assert set(rows[rows["metric"] == "id_accuracy"]["value"]) == {"76.18"}
    per_set = rows[rows["paper_table"] == "Table 2"]
    assert set(per_set["ood_set"]) == {"ssb_hard", "ninco", "inaturalist", "textures",
                                       "openimage_o"}
    assert len(per_set) == 5 * 3 * 5  # five detectors x three tunings x five sets


def test_settings_the_issue_names() -> None:
    sun = published.load("imagenet1k-vs-sun").drop_duplicates("method").set_index("method")
    assert sun.loc["RP+GradNorm", "backbone"] == "ResNet-101"
    assert "ImageNet-LT-a8" in sun.loc["RP+GradNorm", "train_data"]
    assert sun.loc["MOOD", "backbone"] == "BEiT-L"
    for method in ("NNGuide (RegNet)", "MOS (BiT-S-R101x1)"):
        assert sun.loc[method, "uses_additional_data"] == "True"
        assert sun.loc[method, "additional_data"].startswith("yes")
    assert sun.loc["ReAct (ResNet-50)", "weights"] == "timm:resnet50.tv_in1k"
    assert json.loads(sun.loc["DICE + ReAct (ResNet-50)", "hyperparams"]) == {
        "react_percentile": 90.0}


def test_every_row_names_real_oodbench_settings() -> None:
    detectors = {d["name"] for d in available()}
    rows = published.load_all([n for n in published.tables() if n != "cood"])
    for row in rows.itertuples():
        assert row.detector in detectors | {""}, row
        if row.preset:
            preset_for(row.detector, row.preset)  # raises when the preset does not exist
        if row.hyperparams:
            assert isinstance(json.loads(row.hyperparams), dict)
        assert row.metric in METRIC_FAMILY and row.unit in ("%", "fraction")
        assert row.tuning in set(TUNING_NAMES) | {""}
        assert row.fit_data in ("train", "id_val", "none", "")
        float(row.value)
        for spec in filter(None, row.weights.split(";")):
            assert spec.split(":", 1)[0] in FAMILIES, spec


def test_the_cood_table_keeps_the_official_file_text() -> None:
    packed = resources.files("oodbench.results").joinpath("_data", "all_paper_results.csv.xz")
    raw = pd.read_csv(io.BytesIO(lzma.decompress(packed.read_bytes())), dtype=str,
                      keep_default_na=False)
    want = raw[(raw["model name"] == "vit_large_patch32_384")
               & (raw["confidence function"] == "max_logit")]["ood-auroc"].tolist()
    rows = published.load("cood")
    got = rows[(rows["backbone"] == "vit_large_patch32_384") & (rows["detector"] == "maxlogit")]
    assert got["value"].tolist() == want and len(want) == 11
    assert got["ood_set"].tolist() == [f"level_{i}" for i in range(11)]
    assert set(got["weights"]) == {"timm:vit_large_patch32_384"}


def test_a_changed_file_is_refused() -> None:
    info = published.table_info("imagenet1k-vs-sun")
    broken = dataclasses.replace(info, sha256="0" * 64)
    with pytest.raises(CacheError, match="sha256"):
        catalogue.table_bytes(broken)


def test_unknown_names_suggest_the_closest() -> None:
    with pytest.raises(UnknownNameError, match="imagenet1k-vs-sun"):
        published.table_info("imagenet1k-vs-sum")
    with pytest.raises(UnknownNameError, match="'ReAct \\(ResNet-50\\)'"):
        published.select(published.load("imagenet1k-vs-sun"), "ReAct (ResNet50)")


@pytest.mark.parametrize("name", [n for n, i in published.tables().items() if i.printed])
def test_printed_csv_hashes_to_the_source_file_as_published(name: str) -> None:
    """Always (no shared data needed): the source's own table rebuilt from the bundled rows is
    byte for byte the published file (LF line endings), whose sha256 the catalogue records."""
    text = published.printed(name).to_csv(index=False, lineterminator="\n")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert digest == published.table_info(name).printed["source_sha256"]


def test_a_typo_in_the_catalogue_names_the_file_the_table_and_the_closest_key() -> None:
    entry = '[tables.x]\ntitle = "t"\npaper = "p"\nsource = "s"\nmetrics = "m"\nloader = "cood"\n'
    assert catalogue.parse_catalogue(entry, "cat.toml")["x"].loader == "cood"
    with pytest.raises(ConfigError) as err:
        catalogue.parse_catalogue(entry.replace("metrics =", "metric ="), "cat.toml")
    assert str(err.value).startswith("cat.toml: [tables].x: unknown key 'metric'; did you mean "
                                      "'metrics'? valid keys: title, paper, source, metrics,")
    with pytest.raises(ConfigError, match=r"^cat.toml: \[tables\].x: table 'x' needs file and sha256"):
        catalogue.parse_catalogue(entry.replace('loader = "cood"', ""), "cat.toml")
