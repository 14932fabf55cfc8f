"""``oodbench paper leaderboard | rank``."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from oodbench.cli.main import main


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


def test_leaderboard(cood_paper_csv: Path) -> None:
    result = _invoke("paper", "leaderboard", "--kappa", "max_logit", "--levels", "0,5,10",
                     "--top", "10", "--csv", str(cood_paper_csv))
    assert result.exit_code == 0, result.output
    raw = pd.read_csv(cood_paper_csv)
    sub = raw[raw["confidence function"] == "max_logit"]
    board = pd.read_csv(io.StringIO(result.stdout), sep="\t")  # piped: tab-separated
    for level in (0, 5, 10):
        at = sub[sub["severity level"] == level].nlargest(10, "ood-auroc")
        assert board.loc[board["level"] == level, "model"].tolist() == at["model name"].tolist()
    assert "vit_large_patch16_384_original" in result.output
    table = _invoke("paper", "leaderboard", "--kappa", "max_logit", "--levels", "0,5,10",
                    "--top", "10", "--csv", str(cood_paper_csv), "--format", "table")
    for level in (0, 5, 10):  # a table per level
        assert f"C-OOD level {level}, kappa = max_logit" in table.output


def test_rank(cood_paper_csv: Path, tmp_path: Path) -> None:
    results = pd.DataFrame({"detector": ["msp", "maxlogit"], "group": ["level_0", "level_10"],
                            "auroc": [0.95, 0.70], "n_id": [10, 10]})
    for path in (tmp_path / "r.csv", tmp_path / "r.parquet"):
        if path.suffix == ".csv":
            results.to_csv(path, index=False)
        else:
            results.to_parquet(path)
        refused = _invoke("paper", "rank", str(path), "--csv", str(cood_paper_csv))
        assert refused.exit_code == 2 and "ID test images" in refused.output
        result = _invoke("paper", "rank", str(path), "--allow-mismatch", "--csv",
                         str(cood_paper_csv))
        assert result.exit_code == 0, result.output
        assert "percentile_rank" in result.output and "softmax" in result.output
        assert "max_logit" in result.output
        assert "NOT comparable with the paper's benchmark" in result.output


def test_errors_are_one_line(cood_paper_csv: Path, tmp_path: Path) -> None:
    bad_kappa = _invoke("paper", "leaderboard", "--kappa", "softmx", "--csv", str(cood_paper_csv))
    assert bad_kappa.exit_code == 2 and "Did you mean 'softmax'" in bad_kappa.output
    bad_levels = _invoke("paper", "leaderboard", "--levels", "a,b", "--csv", str(cood_paper_csv))
    assert bad_levels.exit_code == 2 and "comma-separated integers" in bad_levels.output
    missing = _invoke("paper", "rank", str(tmp_path / "none.csv"), "--csv", str(cood_paper_csv))
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_rank_reads_the_long_table_of_oodbench_run(cood_paper_csv: Path, tmp_path: Path) -> None:
    """An output folder of oodbench before the store (one results.parquet, nested fields as
    JSON text) ranks as it is."""
    from oodbench.results.table import from_wide, with_text

    wide = pd.DataFrame({"detector": ["msp", "msp"], "hyperparams": ["{}", "{}"],
                         "group": ["level_0", "level_10"], "level": [0, 10],
                         "auroc": [0.95, 0.70], "auroc_ci_low": [0.9, 0.6],
                         "auroc_ci_high": [0.97, 0.8], "n_id": [50_000] * 2, "n_ood": [5, 5],
                         "n_classes": [1000] * 2, "n_levels": [11] * 2})
    long = from_wide(wide, model="m", benchmark="cood", cell="c", seconds=1.0, time="t")
    out = tmp_path / "run-output"
    out.mkdir()
    with_text(long).to_parquet(out / "results.parquet")
    png = tmp_path / "rank.png"
    result = _invoke("paper", "rank", str(out), "--png", str(png), "--csv", str(cood_paper_csv))
    assert result.exit_code == 0, result.output
    assert "percentile_rank" in result.output and "softmax" in result.output
    assert "comparable as far as the results record" in result.output
    assert "unknown  OOD pool" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rank_says_why_nothing_was_ranked(tmp_path: Path) -> None:
    """Issue 12.8: no C-OOD rows used to print a blank line and exit 0."""
    from oodbench.results.table import ResultsTable, from_wide, status_row

    out = tmp_path / "sets-only"
    wide = pd.DataFrame({"detector": ["msp"], "group": ["inat"], "auroc": [0.9], "n_id": [10],
                         "n_ood": [5]})
    ResultsTable(out).append(from_wide(wide, model="m", benchmark="openood", cell="c",
                                       seconds=1.0, time="t"))
    result = _invoke("paper", "rank", str(out))
    assert result.exit_code == 2
    assert "no C-OOD rows" in result.output and "['openood']" in result.output
    failed = tmp_path / "all-failed"
    ResultsTable(failed).append(status_row(model="m", detector="msp", hyperparams="{}",
                                           benchmark="cood", cell="c", status="failed",
                                           error="boom", seconds=0.0, time="t"))
    result = _invoke("paper", "rank", str(failed))
    assert result.exit_code == 2 and "no finished cell" in result.output
    assert "'failed': 1" in result.output


def test_offline_leaderboard_full_precision_and_truncated() -> None:
    """The issue's example, with no --csv: the bundled copy."""
    args = ("paper", "leaderboard", "--kappa", "max_logit", "--levels", "0,5,10", "--model",
            "vit_large_patch32_384")
    full = _invoke(*args)
    assert full.exit_code == 0, full.output
    for value in ("0.9958857884", "0.9632055716", "0.7748394832"):
        assert value in full.output
    assert "vit_large_patch32_384_original" not in full.output
    cut = _invoke(*args, "--digits", "4", "--truncate", "--format", "csv")
    assert cut.exit_code == 0, cut.output
    lines = cut.output.strip().splitlines()
    assert lines[0] == "level,rank,model,auroc,id_accuracy,id_auroc,percentile"
    assert [line.split(",")[3] for line in lines[1:]] == ["0.9958", "0.9632", "0.7748"]
    rounded = _invoke(*args, "--digits", "4", "--format", "json")
    import json

    assert [r["auroc"] for r in json.loads(rounded.output)] == [0.9959, 0.9632, 0.7748]
    markdown = _invoke(*args, "--format", "markdown")
    assert "| level | rank | model | auroc |" in markdown.output
    assert "| 0 | 3 | vit_large_patch32_384 | 0.9958857884 |" in markdown.output


def test_show(tmp_path: Path) -> None:
    png = tmp_path / "out" / "vit.png"  # its folder is created (examples/out/ in a fresh clone)
    result = _invoke("paper", "show", "vit_large_patch32_384", "--kappa", "max_logit", "--png",
                     str(png), "--format", "table")
    assert result.exit_code == 0, result.output
    assert "vit_large_patch32_384, kappa = max_logit" in result.output
    for value in ("0.9958857884", "0.7748394832", "10.9102420806885", "13.1206398010254"):
        assert value in result.output  # every level, every metric, 15 significant digits
    assert "max_logit  " in result.output and "▁" in result.output  # the sparkline
    assert png.read_bytes()[:4] == b"\x89PNG"
    every = _invoke("paper", "show", "vit_large_patch32_384", "--format", "csv")
    frame = pd.read_csv(__import__("io").StringIO(every.output))
    assert len(frame) == 44 and set(frame["kappa"]) == {"softmax", "max_logit", "entropy", "odin"}
    unknown = _invoke("paper", "show", "vit_large_patch32_38")
    assert unknown.exit_code == 2 and "vit_large_patch32_384" in unknown.output


def test_values_shown_without_binary_noise() -> None:
    """Issue 23 item 9: 0.8419200000000001 and 0.30000000000000004 (arithmetic noise on the
    published values) print as 0.84192 and 0.3, in every format."""
    board = _invoke("paper", "leaderboard", "--kappa", "max_logit", "--levels", "0,5,10",
                    "--format", "table")
    assert board.exit_code == 0, board.output
    assert "0.84192 " in board.output and "0.8419200000000001" not in board.output
    show = _invoke("paper", "show", "vit_large_patch32_384", "--kappa", "max_logit", "--format",
                   "table")
    assert "│        0.3 │" in show.output and "0.30000000000000004" not in show.output
    for fmt in ("tsv", "csv", "json", "markdown"):
        out = _invoke("paper", "show", "vit_large_patch32_384", "--kappa", "max_logit",
                      "--format", fmt).output
        assert "0.30000000000000004" not in out and "0.3" in out, fmt
    import json

    records = json.loads(_invoke("paper", "show", "vit_large_patch32_384", "--kappa",
                                 "max_logit", "--format", "json").output)
    assert [r["percentile"] for r in records][:4] == [0.0, 0.1, 0.2, 0.3]


def test_rank_hint_names_the_benchmarks_key(tmp_path: Path) -> None:
    """Issue 23 item 9: the hint names the experiment file's real key, [[benchmarks]]."""
    from oodbench.results.table import ResultsTable

    rows = pd.DataFrame([{"model": "m", "detector": "msp", "hyperparams": "{}",
                          "benchmark": "sets", "group": "noise", "metric": "auroc",
                          "value": 0.9, "status": "ok", "cell": "c1",
                          "time": "2026-12-01T00:00:00"}])
    ResultsTable(tmp_path).append(rows)
    result = _invoke("paper", "rank", str(tmp_path))
    assert result.exit_code == 2
    assert "[[benchmarks]] type = \"cood\"" in " ".join(result.output.split())


def test_findings(tmp_path: Path) -> None:
    from oodbench.results.paper_findings import CLAIMS

    result = _invoke("paper", "findings", "--out", str(tmp_path / "f"))
    assert result.exit_code == 0, result.output
    for number, claim in CLAIMS.items():
        assert f"({number})" in result.output and claim in result.output
    assert result.output.count("verdict:") == 5 and "paper: 96 %" in result.output
    written = sorted(p.name for p in (tmp_path / "f").iterdir())
    assert "findings.md" in written and "finding-5.png" in written and "finding-1.csv" in written
    assert {"finding-3-readings.csv", "finding-5-versus_softmax.csv"} <= set(written)
    # claim 3 in both readings, each with its number and definition
    assert "paper's reading (the best zero-shot CLIP instance, i.e. the (CLIP model, kappa) " \
        "pair" in result.output
    assert "like-for-like (that CLIP instance against every other model under the same kappa" \
        in result.output
    readings = pd.read_csv(tmp_path / "f" / "finding-3-readings.csv").set_index("reading")
    for reading, label in (("paper", "paper's reading"), ("like_for_like", "like-for-like")):
        line = next(ln for ln in result.output.splitlines() if label in ln)
        assert f"{readings.loc[reading, 'percentile']:.1f} %" in line
    # claim 1 counts the BiT pair; claim 5 covers every kappa of the table
    assert "1 listed explicitly: resnetv2_50x1_bit_distilled" in result.output
    for kappa in ("max_logit", "entropy", "odin", "mc_dropout"):
        assert f"{kappa} better on " in result.output


def test_rank_png_is_the_file_asked_for_with_labelled_rows_at_their_levels(tmp_path: Path) -> None:
    """Issue 33 item 3: `--png rank.png` wrote rank-msp.png and rank-mc_dropout.png; the two
    knn configurations were two identical 'knn' rows; two levels were compared with (and drawn
    at) the paper's levels 0 and 1. Now: exactly rank.png, one panel per published kappa;
    rows labelled by configuration; the hardest of two levels at the paper's level 10."""
    import io
    import json

    from oodbench.results.table import from_wide, with_text

    configs = [("msp", {}), ("mc_dropout", {"passes": 2}), ("knn", {"k": 1}), ("knn", {"k": 3})]
    wide = pd.DataFrame([{"detector": name, "hyperparams": json.dumps(hp), "group": f"level_{i}",
                          "level": i, "percentile": float(i), "n_levels": 2, "auroc": 0.9 - i / 4,
                          "n_id": 18, "n_ood": 6, "n_classes": 1}
                         for name, hp in configs for i in (0, 1)])
    out = tmp_path / "run-output"
    out.mkdir()
    cells = [from_wide(wide[wide["hyperparams"] == json.dumps(hp)].query("detector == @name"),
                       model="m", benchmark="cood", cell=f"c{i}", seconds=1.0, time="t")
             for i, (name, hp) in enumerate(configs)]  # one cell per configuration, as a run
    with_text(pd.concat(cells, ignore_index=True)).to_parquet(out / "results.parquet")
    figures = tmp_path / "figures"
    figures.mkdir()
    result = CliRunner().invoke(main, ["paper", "rank", str(out), "--allow-mismatch", "--png",
                                       str(figures / "rank.png"), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in figures.iterdir()] == ["rank.png"], result.stderr
    assert (figures / "rank.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {figures / 'rank.png'} (kappa mc_dropout, softmax)" in result.stderr
    assert "no curve for knn" in result.stderr
    ranked = pd.read_csv(io.StringIO(result.stdout))
    assert ranked.groupby("label").size().to_dict() == {
        "knn (k=1)": 2, "knn (k=3)": 2, "mc_dropout": 2, "msp": 2}
    assert ranked["paper_level"].tolist() == [0, 10] * 4
