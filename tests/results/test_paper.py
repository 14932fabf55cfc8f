"""The published C-OOD results: loading, leaderboards, ranks and severity curves."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from scipy.stats import percentileofscore

from oodbench.errors import (
    CacheError,
    DataError,
    EmptyInputError,
    InvalidInputError,
    MissingDataError,
    ProtocolMismatchError,
    UnknownNameError,
)
from oodbench.results import paper

matplotlib.use("Agg")

VIT_L32 = ("vit_large_patch32_384", "vit_large_patch32_384_original")


@pytest.fixture
def raw(cood_paper_csv: Path) -> pd.DataFrame:
    return pd.read_csv(cood_paper_csv)


@pytest.fixture
def df(cood_paper_csv: Path) -> pd.DataFrame:
    return paper.load(cood_paper_csv)


def test_load_gives_tidy_columns(df: pd.DataFrame, raw: pd.DataFrame) -> None:
    assert len(df) == len(raw) == 20328
    assert list(df.columns) == [
        "model", "kappa", "detector", "paper_kappa", "level", "percentile", "auroc",
        "ood_mean_kappa", "id_accuracy", "id_auroc", "id_mean_kappa",
    ]
    assert df.attrs["unknown_kappas"] == []
    assert set(df["kappa"]) == {"softmax", "max_logit", "entropy", "odin", "mc_dropout"}
    mapping = df.drop_duplicates("paper_kappa").set_index("paper_kappa")["detector"].to_dict()
    assert mapping["softmax"] == "msp" and mapping["max_logit"] == "maxlogit"
    assert mapping["odin_temperature-2_noise_mag-1e-05"] == "odin"
    assert sorted(df["level"].unique()) == list(range(11))


def test_vit_l32_384_rows_are_exactly_the_file(df: pd.DataFrame, raw: pd.DataFrame) -> None:
    mine = df[df["model"].isin(VIT_L32)].reset_index(drop=True)
    theirs = raw[raw["model name"].isin(VIT_L32)].reset_index(drop=True)
    assert len(mine) == len(theirs) == 11 * 9  # 4 + 5 confidence functions x 11 levels
    for raw_col, col in paper.COLUMNS.items():
        assert mine[col].tolist() == theirs[raw_col].tolist(), col


def test_every_paper_kappa_is_an_oodbench_detector() -> None:
    from oodbench.detectors import create

    for k in paper.PAPER_KAPPAS:
        det = create(k.detector, **k.hyperparams)
        assert paper.kappa_for(k.detector) is paper.kappa_for(k.kappa) is k
    odin = create("odin", **paper.kappa_for("odin").hyperparams)
    assert (odin.temperature, odin.epsilon) == (2.0, 1e-5)  # the paper's ODIN setting
    assert odin.gradient == "probabilities" and odin.preset == "cood_code"  # as the code computes it
    assert det.hyperparams["passes"] == 30  # MC-dropout, the last entry


def test_like_for_like_needs_the_published_configuration() -> None:
    from oodbench.detectors import create

    odin = paper.kappa_for("odin")
    assert paper.reproduces(odin, create("odin", preset="cood_code", batch_size=8).hyperparams)
    assert not paper.reproduces(odin, create("odin", preset="cood").hyperparams)  # the ODIN-paper gradient
    assert not paper.reproduces(odin, create("odin").hyperparams)  # T = 1000
    assert paper.reproduces(paper.kappa_for("msp"), {})


def test_level0_max_logit_leaderboard_is_topped_by_the_file(df, raw) -> None:
    sub = raw[raw["confidence function"] == "max_logit"]
    best = sub.loc[sub.groupby("severity level")["ood-auroc"].idxmax()].set_index("severity level")
    board = paper.leaderboard(df, "max_logit", 0, top=10)
    assert board["model"].iloc[0] == best.loc[0, "model name"] == "vit_large_patch16_384_original"
    top10 = sub[sub["severity level"] == 0]["ood-auroc"].nlargest(10).tolist()
    assert board["auroc"].tolist() == top10
    assert board["rank"].tolist() == sorted(board["rank"].tolist()) and board["rank"].iloc[0] == 1
    several = paper.leaderboard(df, "maxlogit", [0, 5, 10], top=3)  # detector name works too
    assert several.groupby("level").size().to_dict() == {0: 3, 5: 3, 10: 3}
    for level in (5, 10):
        assert several[several["level"] == level]["model"].iloc[0] == best.loc[level, "model name"]


def test_rank_matches_scipy_percentileofscore(df: pd.DataFrame) -> None:
    published = df[(df["kappa"] == "softmax") & (df["level"] == 4)]["auroc"].to_numpy()
    mine = pd.DataFrame({
        "detector": ["msp", "msp", "knn"],
        "group": ["level_4", "level_4", "level_4"],
        "auroc": [float(np.median(published)), 0.99999, 0.9],
    })
    ranked = paper.rank(df, mine)
    for i in (0, 1):
        value = mine["auroc"].iloc[i]
        assert ranked["percentile_rank"].iloc[i] == pytest.approx(
            percentileofscore(published, value, kind="mean"), abs=1e-9
        )
        assert ranked["position"].iloc[i] == 1 + (published > value).sum()
        assert ranked["n_published"].iloc[i] == published.size
    assert ranked["kappa"].iloc[0] == "softmax"
    assert np.isnan(ranked["percentile_rank"].iloc[2]) and ranked["n_published"].iloc[2] == 0
    assert not ranked["comparable"].any()  # n_id, window and the level count are not recorded
    forced = paper.rank(df, mine.assign(level=4).drop(columns="group"), kappa="softmax")
    assert forced["n_published"].iloc[2] == published.size
    with pytest.raises(InvalidInputError, match="level"):
        paper.rank(df, mine.drop(columns="group"))


def test_plot_severity_curves(df: pd.DataFrame) -> None:
    own = pd.DataFrame({"detector": "maxlogit", "level": range(11), "auroc": np.linspace(.9, .6, 11)})
    ax = paper.plot_severity_curves(df, list(VIT_L32), "max_logit", own={"mine": own})
    lines = ax.get_lines()
    assert len(lines) == 3
    expected = df[(df["model"] == VIT_L32[0]) & (df["kappa"] == "max_logit")].sort_values("level")
    assert list(lines[0].get_ydata()) == expected["auroc"].tolist()
    assert list(lines[2].get_ydata()) == own["auroc"].tolist()
    with pytest.raises(UnknownNameError, match="vit_large_patch32_384"):
        paper.plot_severity_curves(df, ["vit_large_patch32_38"], "max_logit")


def test_bad_queries(df: pd.DataFrame, tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="max_logit"):
        paper.leaderboard(df, "max_logits")
    with pytest.raises(InvalidInputError, match=r"levels \[11\]"):
        paper.leaderboard(df, "softmax", [0, 11])
    with pytest.raises(MissingDataError, match="does not exist"):
        paper.load(tmp_path / "absent.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="missing columns"):
        paper.load(tmp_path / "other.csv")


def test_download_checks_the_checksum_and_caches(cood_paper_csv: Path) -> None:
    # a file:// URL exercises the download path offline; the cache is a temp folder in tests
    url = cood_paper_csv.resolve().as_uri()
    path = paper.download(url, sha256=paper.PAPER_RESULTS_SHA256)
    assert path.read_bytes() == cood_paper_csv.read_bytes()
    assert path == paper.download(url, sha256=paper.PAPER_RESULTS_SHA256)  # cached
    path.unlink()
    with pytest.raises(CacheError, match="expected 0000"):
        paper.download(url, sha256="0" * 64)
    assert not path.exists()


def test_rank_says_whether_a_row_is_like_for_like(df: pd.DataFrame) -> None:
    from oodbench.benchmarks.base import hyperparams_json
    from oodbench.detectors import create

    mine = pd.DataFrame({
        "detector": ["odin", "odin", "msp"], "group": ["level_0"] * 3, "auroc": [0.9, 0.9, 0.9],
        "hyperparams": [hyperparams_json(create("odin", preset="cood_code")),
                        hyperparams_json(create("odin", preset="cood")), "{}"],
    })
    ranked = paper.rank(df, mine)
    assert ranked["like_for_like"].tolist() == [True, False, True]
    assert ranked["position"].iloc[0] == ranked["position"].iloc[1]  # the same published numbers


# -- the bundled copy, look-ups, the paper's truncated leaderboard ---------------------------------
def test_bundled_copy_is_the_official_file_offline(cood_paper_csv: Path) -> None:
    import hashlib

    data = paper.bundled_bytes()
    assert hashlib.sha256(data).hexdigest() == paper.PAPER_RESULTS_SHA256
    assert data == cood_paper_csv.read_bytes()
    pd.testing.assert_frame_equal(paper.load(), paper.load(cood_paper_csv))


def test_bundled_copy_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import lzma
    from types import SimpleNamespace

    (tmp_path / "_data").mkdir()
    packed = tmp_path / "_data" / paper.BUNDLED_NAME
    monkeypatch.setattr(paper.published, "resources", SimpleNamespace(files=lambda _package: tmp_path))
    packed.write_bytes(lzma.compress(b"model name,severity level\nx,0\n"))
    with pytest.raises(CacheError, match="damaged"):
        paper.bundled_bytes()
    packed.write_bytes(b"not xz")
    with pytest.raises(DataError, match="cannot be read"):
        paper.bundled_bytes()


def test_get_one_model_full_precision() -> None:
    rows = paper.get("vit_large_patch32_384", "max_logit")
    assert rows["level"].tolist() == list(range(11))
    assert rows["auroc"].iloc[0] == 0.9958857884  # the file's value, not a rounded one
    assert set(paper.get("vit_large_patch32_384")["kappa"]) == {
        "softmax", "max_logit", "entropy", "odin"}
    with pytest.raises(UnknownNameError, match="vit_large_patch32_384"):
        paper.get("vit_large_patch32_38")
    with pytest.raises(InvalidInputError, match="no published results for kappa 'mc_dropout'"):
        paper.get("vit_large_patch32_384", "mc_dropout")


def test_quantize_truncates_like_the_paper() -> None:
    board = paper.leaderboard(paper.load(), "max_logit", [0, 5, 10], model="vit_large_patch32_384")
    assert board["auroc"].tolist() == [0.9958857884, 0.9632055716, 0.7748394832]
    cut = paper.quantized(board, 4, truncate=True)
    assert cut["auroc"].tolist() == [0.9958, 0.9632, 0.7748]  # the paper's leaderboard
    assert paper.quantized(board, 4)["auroc"].tolist() == [0.9959, 0.9632, 0.7748]
    assert paper.quantize(-0.12349, 3, truncate=True) == -0.123  # toward zero
    assert paper.quantize(0.1 + 0.2, 1, truncate=True) == 0.3  # repr-based: no 0.2999... cut


def test_leaderboard_model_patterns(df: pd.DataFrame) -> None:
    one = paper.leaderboard(df, "max_logit", [0, 10], model="vit_large_patch32_384")
    assert one["model"].unique().tolist() == ["vit_large_patch32_384"]
    full = paper.leaderboard(df, "max_logit", [0, 10], top=None)
    expected = full[full["model"] == "vit_large_patch32_384"]["rank"].tolist()
    assert one["rank"].tolist() == expected  # ranked among every published model
    many = paper.leaderboard(df, "max_logit", 0, model="vit_large_patch32_*")
    assert set(many["model"]) == set(VIT_L32)
    with pytest.raises(UnknownNameError):
        paper.leaderboard(df, "max_logit", 0, model="nothing_*")


# -- comparing a user's benchmark with the paper's ---------------------------------------------------
def cood_rows(n_levels: int = 11, n_id: int = 50_000, window: int = 1000) -> pd.DataFrame:
    return pd.DataFrame({
        "detector": "maxlogit", "level": range(n_levels), "auroc": np.linspace(0.99, 0.7, n_levels),
        "n_id": n_id, "n_classes": window, "n_levels": n_levels, "n_pool_classes": 10_450,
    })


def test_rank_refuses_a_different_benchmark(df: pd.DataFrame) -> None:
    """Issue 12.8: a 4-level CIFAR pool is not the paper's 11-level ImageNet-21k benchmark."""
    cifar = cood_rows(n_levels=4, n_id=10_000, window=2)
    with pytest.raises(ProtocolMismatchError) as err:
        paper.rank(df, cifar)
    message = str(err.value)
    for item in ("severity levels: paper 11, yours 4", "window", "paper 1,000, yours 2",
                 "ID test images", "--allow-mismatch"):
        assert item in message
    flagged = paper.rank(df, cifar, allow_mismatch=True)
    assert not flagged["comparable"].any() and len(flagged) == 4
    statuses = {c.item: c.status for c in flagged.attrs["protocol"]}
    assert statuses["OOD pool"] == "unknown"
    assert list(statuses.values()).count("differs") == 3
    with pytest.raises(ProtocolMismatchError, match="levels up to 12"):
        paper.rank(df, cood_rows(13).drop(columns="n_levels"))


def test_rank_accepts_the_papers_benchmark(df: pd.DataFrame) -> None:
    ranked = paper.rank(df, cood_rows())
    checks = {c.item: c.status for c in ranked.attrs["protocol"]}
    assert [checks[k] for k in list(checks)[:3]] == ["same", "same", "same"]
    assert checks["OOD pool"] == "unknown"  # the pool's identity is never verifiable from rows
    assert not ranked["comparable"].any()
    assert ranked["n_published"].iloc[0] == (df["kappa"] == "max_logit").sum() / 11


def test_rank_says_why_nothing_was_ranked(df: pd.DataFrame) -> None:
    with pytest.raises(EmptyInputError, match="no C-OOD rows"):
        paper.rank(df, cood_rows().iloc[:0])


def test_plot_among_published(df: pd.DataFrame) -> None:
    rows = cood_rows().assign(auroc_ci_low=lambda d: d["auroc"] - 0.01,
                              auroc_ci_high=lambda d: d["auroc"] + 0.02)
    fig = paper.plot_among_published(df, rows, label="mine")
    ax = fig.axes[0]
    n_models = df[df["kappa"] == "max_logit"]["model"].nunique()
    assert len(ax.get_lines()) >= n_models + 2  # every published curve, the median, mine
    assert f"published median ({n_models} models)" in [t.get_text() for t in ax.get_legend().texts]
    assert len(ax.containers) == 1  # the error bars of my curve
    with pytest.raises(InvalidInputError, match="several detectors"):
        paper.plot_among_published(df, pd.concat([rows, rows.assign(detector="msp")]))
    fig = paper.plot_model_curves(df, "vit_large_patch32_384")
    assert len(fig.axes[0].get_lines()) == 4


# -- issue 33 item 3: each row at its severity level, labelled by its configuration ----------------
def test_two_levels_are_ranked_and_drawn_at_the_papers_levels_0_and_10(df: pd.DataFrame) -> None:
    """Level i of n lies at q = i / (n - 1) of the severity order, the paper's level 10 q: the
    hardest of two levels is compared with the paper's level 10 (not 1) and drawn at x = 10."""
    two = pd.DataFrame({"detector": "msp", "level": [0, 1], "n_levels": 2, "auroc": [0.9, 0.6]})
    assert paper.paper_positions(two).tolist() == [0.0, 10.0]
    recorded = two.drop(columns="n_levels").assign(percentile=[0.0, 1.0])  # CoodBenchmark's q
    assert paper.paper_positions(recorded).tolist() == [0.0, 10.0]
    assert paper.paper_positions(cood_rows(4)).tolist() == pytest.approx([0, 10 / 3, 20 / 3, 10])
    assert paper.paper_positions(two.drop(columns="n_levels")).tolist() == [0.0, 1.0]  # paper's
    ranked = paper.rank(df, two, allow_mismatch=True)
    assert ranked["level"].tolist() == [0, 1] and ranked["paper_level"].tolist() == [0, 10]
    hardest = df[(df["kappa"] == "softmax") & (df["level"] == 10)]["auroc"].to_numpy()
    assert ranked["n_published"].iloc[1] == hardest.size
    assert ranked["position"].iloc[1] == 1 + (hardest > 0.6).sum()
    assert "paper_level" not in paper.rank(df, cood_rows()).columns  # the paper's own levels
    for fig in (paper.plot_among_published(df, two), paper.plot_rank(df, two)):
        (mine,) = [line for line in fig.axes[0].get_lines()
                   if line.get_label().startswith("yours")]
        assert list(mine.get_xdata()) == [0.0, 10.0] and list(mine.get_ydata()) == [0.9, 0.6]
    ax = paper.plot_severity_curves(df, [VIT_L32[0]], "softmax", own={"mine": two})
    assert list(ax.get_lines()[-1].get_xdata()) == [0.0, 10.0]


def _configurations(*detectors: object, n_levels: int = 11) -> pd.DataFrame:
    from oodbench.benchmarks.base import hyperparams_json

    return pd.concat([pd.DataFrame({
        "detector": det.name, "hyperparams": hyperparams_json(det), "level": range(n_levels),
        "n_levels": n_levels, "auroc": np.linspace(0.95 - i / 100, 0.6, n_levels)})
        for i, det in enumerate(detectors)], ignore_index=True)


def test_rank_rows_and_curves_are_labelled_by_configuration(df: pd.DataFrame) -> None:
    """Two knn rows of different k (or two ODIN presets) were two identical 'knn' rows: each
    row's label names the hyper-parameters that tell the configurations apart."""
    from oodbench.detectors import create
    from oodbench.results.leaderboard import detector_labels

    mine = _configurations(create("knn", k=1), create("knn", k=3), create("odin", preset="cood"),
                           create("odin", preset="cood_code"), create("msp"))
    ranked = paper.rank(df, mine)
    assert ranked["label"].tolist() == detector_labels(mine).tolist()
    labels = list(dict.fromkeys(ranked["label"]))
    assert len(labels) == 5 and labels[-1] == "msp"
    assert "k=1" in labels[0] and "k=3" in labels[1] and labels[0].startswith("knn (")
    assert labels[2] != labels[3] and all(label.startswith("odin (") for label in labels[2:4])
    assert (ranked.groupby("label").size() == 11).all()
    given = paper.rank(df, mine.assign(label="mine"))  # a label column the rows carry wins
    assert set(given["label"]) == {"mine"}
    panels, missing = paper.rank_panels(mine)
    assert list(panels) == ["odin", "softmax"] and list(missing) == ["knn"]
    fig = paper.plot_rank(df, mine)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["kappa = odin", "kappa = softmax"]
    curves = [line.get_label() for line in shown[0].get_lines()
              if line.get_label().startswith("yours")]
    assert curves == [f"yours ({labels[2]})", f"yours ({labels[3]})"]  # no intervals given
    with pytest.raises(UnknownNameError, match="knn"):
        paper.plot_rank(df, mine[mine["detector"] == "knn"])
