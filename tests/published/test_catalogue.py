"""``oodbench.published``: the catalogue of published tables, values exactly as printed."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import lzma
import re
from importlib import resources

import pandas as pd
import pytest

from oodbench import published
from oodbench.detectors import available, preset_for
from oodbench.errors import CacheError, ConfigError, InvalidInputError, UnknownNameError
from oodbench.models.registry import FAMILIES
from oodbench.published import catalogue, cood
from oodbench.published.compare import METRIC_FAMILY, TUNING_NAMES
from tests.conftest import shared_path

#: catalogue table -> the shared leaderboard file it reproduces
LEADERBOARDS = {
    "imagenet1k-vs-sun": "imagenet1k_vs_sun.csv",
    "imagenet1k-ood-losses": "imagenet1k_ood_losses.csv",
    "imagenet1k-resnet50-tuning": "imagenet1k_resnet50_tuning.csv",
}


def _table_files() -> set[str]:
    """The CSV files of the package's ``_tables`` folder."""
    folder = resources.files("oodbench.published").joinpath("_tables")
    return {f.name for f in folder.iterdir() if f.name.endswith(".csv")}


def test_the_catalogue_holds_every_table_file_and_every_loader_reads_one() -> None:
    """Generated from the registry and the files: every CSV of ``_tables`` is one table, every
    registered loader reads at least one table, and the leaderboards are there."""
    infos = published.tables()
    assert {info.file for info in infos.values() if info.file} == _table_files()
    assert {info.loader for info in infos.values()} == set(catalogue.LOADERS)
    assert set(LEADERBOARDS) <= set(infos)
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
    assert ash == {"ood_val": "95.74", "held_out_paper": "95.26"}
    assert set(rows[rows["metric"] == "id_accuracy"]["value"]) == {"76.18"}
    per_set = rows[rows["paper_table"] == "Table 2"]
    assert set(per_set["ood_set"]) == {"ssb_hard", "ninco", "inaturalist", "textures",
                                       "openimage_o"}
    assert len(per_set) == 5 * 3 * 5  # five detectors x (held-out, noise, FGSM) x five sets


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
    curated = [n for n, info in published.tables().items()  # (not the C-OOD paper's file)
               if catalogue.LOADERS[info.loader].needs]
    rows = published.load_all(curated)
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
    packed = resources.files("oodbench.published").joinpath("_data", "all_paper_results.csv.xz")
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


def _shared_readme_rows() -> dict[str, tuple[str, str]]:
    """file -> (leaderboard, source): the table of the shared leaderboards' README."""
    text = shared_path("leaderboards", "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`[\w.]+\.csv`", cells[0]):
            rows[cells[0].strip("`")] = (cells[1], cells[4])
    return rows


@pytest.mark.parametrize("name", list(LEADERBOARDS))
def test_each_leaderboard_names_the_site_it_was_read_from(name: str) -> None:
    """The table's source and the read_from of every row read from the leaderboard say where
    the shared README says it was read: the Papers with Code archive (its snapshot date) for
    ImageNet-1k vs SUN; the two tables updated in 2026, after that archive's snapshot, were read
    on sota2.com (with the README's update date), not on Papers with Code."""
    board, source = _shared_readme_rows()[LEADERBOARDS[name]]
    info = published.table_info(name)
    rows = published.load(name)
    if "read_from" in info.printed:  # the tuning table adds rows read from the paper
        rows = rows[rows["read_from"] == info.printed["read_from"]]
    assert len(published.printed(name)) > 0 and len(rows) > 0
    texts = {info.source, *rows["read_from"]}
    archive = re.match(r"pwc-archive snapshot (\d{4}-\d{2}-\d{2})", source)
    for text in texts:
        if archive:
            assert text.startswith("Papers with Code archive (pwc-archive snapshot "
                                   f"{archive[1]}"), text
        else:
            updated = re.search(r"updated (\d{4}-\d{2}-\d{2})", source)
            assert updated is not None and int(updated[1][:4]) >= 2026
            assert text.startswith("sota2.com leaderboard '"), text
            assert f"updated {updated[1]}" in text and "Papers with Code" not in text
            quoted = re.search(r"'([^']+)'", text)
            assert quoted is not None and board.startswith(quoted[1]), (board, text)


def test_every_clip_weights_spec_names_the_activation_its_weights_were_trained_with() -> None:
    """Each CLIP spec in a weights column is an (architecture, tag) pair of open_clip's
    pretrained list whose architecture has the tag's activation: OpenAI's weights in the
    -quickgelu architectures (MCM's ViT-B/16 and ViT-L/14), which oodbench loads as they are."""
    open_clip = pytest.importorskip("open_clip")
    from oodbench.models.clip import activation_mismatch, parse_clip_spec

    curated = [n for n, info in published.tables().items()  # (not the C-OOD paper's file)
               if catalogue.LOADERS[info.loader].needs]
    rows = published.load_all(curated)
    specs = {s for w in rows["weights"] for s in w.split(";") if s.startswith("clip:")}
    assert {"clip:ViT-B-16-quickgelu/openai", "clip:ViT-L-14-quickgelu/openai"} <= specs
    for spec in specs:
        arch, tag = parse_clip_spec(spec.removeprefix("clip:"))
        assert (arch, tag) in open_clip.list_pretrained(), spec
        assert activation_mismatch(arch, tag) is None, spec


def test_cood_rows_keep_the_file_cells_beside_each_value() -> None:
    """Every C-OOD row carries its line of the official file, cell for cell (as the CSV tables
    carry their source's columns), so a value such as ViT-L/32-384's softmax AUROC at severity
    10 stands beside its printed form; printed("cood") is the file itself."""
    raw = pd.read_csv(io.BytesIO(cood.bundled_bytes()), dtype=str, keep_default_na=False)
    rows = published.load("cood")
    pd.testing.assert_frame_equal(rows[list(raw.columns)], raw)
    assert (rows["value"] == rows["ood-auroc"]).all()
    assert (rows["ood_set"] == "level_" + rows["severity level"]).all()
    assert (rows["method"] == rows["confidence function"]).all()
    example = (raw["model name"] == "vit_large_patch32_384") \
        & (raw["confidence function"] == "softmax") & (raw["severity level"] == "10")
    printed_value = raw.loc[example, "ood-auroc"].item()
    mine = rows[(rows["backbone"] == "vit_large_patch32_384") & (rows["method"] == "softmax")
                & (rows["ood_set"] == "level_10")]
    assert mine["value"].tolist() == [printed_value]
    pd.testing.assert_frame_equal(published.printed("cood"), raw)
    softmax = raw[raw["confidence function"] == "softmax"].reset_index(drop=True)
    pd.testing.assert_frame_equal(published.printed("cood", method="softmax"), softmax)
    assert published.table_info("cood").printed["source_sha256"] == cood.PAPER_RESULTS_SHA256


def _without_printed_form(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """The catalogue with ``name``'s printed form taken away; returns the tables that keep one."""
    patched = {n: (dataclasses.replace(i, printed={}) if n == name else i)
               for n, i in catalogue.tables().items()}
    monkeypatch.setattr(catalogue, "tables", lambda: patched)
    return [n for n, i in patched.items() if i.printed]


def test_printed_refuses_a_table_without_a_printed_form(monkeypatch: pytest.MonkeyPatch) -> None:
    keep = _without_printed_form(monkeypatch, "imagenet1k-ood-losses")
    assert published.with_printed_form() == keep and "imagenet1k-ood-losses" not in keep
    with pytest.raises(InvalidInputError) as err:
        published.printed("imagenet1k-ood-losses")
    assert str(err.value) == ("published table 'imagenet1k-ood-losses' has no printed form (its "
                              "source's own table); the tables that have one: "
                              + ", ".join(keep))


def test_printed_rows_of_one_method_whatever_the_key_columns() -> None:
    """OpenOOD's full-spectrum table names its rows by its own columns (Training,
    Postprocessor, Arch, ...), not by a method column: printed(method=...) gives the rows of the
    catalogue's method; select() on a printed table says so instead of failing on the missing
    column."""
    name = "openood-v1.5-imagenet1k-fsood"
    spec = published.table_info(name).printed
    ident = [c for c in spec["columns"] if c not in spec["values"]]  # what names a printed row
    full = published.printed(name)
    assert "method" not in full.columns and {"Training", "Postprocessor"} <= set(ident)
    rows = published.load(name)
    msp = set(map(tuple, rows.loc[rows["method"] == "MSP", ident].to_numpy()))
    want = full[[tuple(k) in msp for k in full[ident].to_numpy()]].reset_index(drop=True)
    assert len(want) == len(msp) > 1
    pd.testing.assert_frame_equal(published.printed(name, method="MSP"), want)
    with pytest.raises(InvalidInputError, match=r"no 'method' column .*printed\(name, method="):
        published.select(full, "MSP")
    with pytest.raises(UnknownNameError, match="'MSP'"):
        published.printed(name, method="MSPP")
