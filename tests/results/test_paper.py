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
    InvalidInputError,
    MissingDataError,
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
    assert odin.reproduces(create("odin", preset="cood_code", batch_size=8).hyperparams)
    assert not odin.reproduces(create("odin", preset="cood").hyperparams)  # the ODIN-paper gradient
    assert not odin.reproduces(create("odin").hyperparams)  # T = 1000
    assert paper.kappa_for("msp").reproduces({})


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
