"""``oodbench paper leaderboard | rank``."""

from __future__ import annotations

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
    for level in (0, 5, 10):
        assert f"C-OOD level {level}, kappa = max_logit" in result.output
        at = sub[sub["severity level"] == level].nlargest(10, "ood-auroc")
        for model in at["model name"]:
            assert model in result.output  # names are never cut
    assert "vit_large_patch16_384_original" in result.output


def test_rank(cood_paper_csv: Path, tmp_path: Path) -> None:
    results = pd.DataFrame({"detector": ["msp", "maxlogit"], "group": ["level_0", "level_10"],
                            "auroc": [0.95, 0.70], "n_id": [10, 10]})
    for path in (tmp_path / "r.csv", tmp_path / "r.parquet"):
        if path.suffix == ".csv":
            results.to_csv(path, index=False)
        else:
            results.to_parquet(path)
        result = _invoke("paper", "rank", str(path), "--csv", str(cood_paper_csv))
        assert result.exit_code == 0, result.output
        assert "percentile_rank" in result.output and "softmax" in result.output
        assert "max_logit" in result.output


def test_errors_are_one_line(cood_paper_csv: Path, tmp_path: Path) -> None:
    bad_kappa = _invoke("paper", "leaderboard", "--kappa", "softmx", "--csv", str(cood_paper_csv))
    assert bad_kappa.exit_code == 2 and "Did you mean 'softmax'" in bad_kappa.output
    bad_levels = _invoke("paper", "leaderboard", "--levels", "a,b", "--csv", str(cood_paper_csv))
    assert bad_levels.exit_code == 2 and "comma-separated integers" in bad_levels.output
    missing = _invoke("paper", "rank", str(tmp_path / "none.csv"), "--csv", str(cood_paper_csv))
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_rank_reads_the_long_table_of_oodbench_run(cood_paper_csv: Path, tmp_path: Path) -> None:
    from oodbench.results.table import from_wide

    wide = pd.DataFrame({"detector": ["msp", "msp"], "hyperparams": ["{}", "{}"],
                         "group": ["level_0", "level_10"], "level": [0, 10],
                         "auroc": [0.95, 0.70], "n_id": [10, 10], "n_ood": [5, 5]})
    long = from_wide(wide, model="m", benchmark="cood", cell="c", seconds=1.0, time="t")
    out = tmp_path / "run-output"
    out.mkdir()
    long.to_parquet(out / "results.parquet")
    result = _invoke("paper", "rank", str(out), "--csv", str(cood_paper_csv))
    assert result.exit_code == 0, result.output
    assert "percentile_rank" in result.output and "softmax" in result.output
