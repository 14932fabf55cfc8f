"""``oodbench run`` and ``oodbench report`` on the tiny experiment, and their error messages."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from oodbench.cli.main import main
from tests._read_only import read_only, snapshot
from tests.conftest import REPO
from tests.run.tiny import add_model, write_tiny_experiment


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


@pytest.fixture
def tiny(tmp_path, monkeypatch, one_thread):  # a tiny CNN: one thread beats two contending ones
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    return write_tiny_experiment(tmp_path)


def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("demo", "run", "report", "list"):
        assert f"  {command} " in result.output
    run_help = invoke("run", "--help").output
    assert "EXPERIMENT.toml" in run_help and "--dry-run" in run_help and "--ray" in run_help


def test_run_then_rerun_then_report(tiny):
    dry = invoke("run", str(tiny), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "10 to run, 0 already finished" in dry.output and "  small_cnn · cood · msp\n" in dry.output
    assert "checks passed: data, 1 model(s), labels and C-OOD windows (nothing extracted)" in dry.output
    assert not (tiny.parent / "out" / "results").exists()

    first = invoke("run", str(tiny), "--no-progress", "--shard-size", "4")
    assert first.exit_code == 0, first.output
    assert first.output.count("cells: 10 ok, 0 failed; results:") == 1
    manifests = list((tiny.parent / "cache" / "activations").glob("*/manifest.json"))
    assert len(manifests) == 5  # one per source: ID fit and test, pool, two OOD sets
    assert {json.loads(m.read_text())["shard_size"] for m in manifests} == {4}
    assert "FPR@95 (ID positive)" in first.output and "knn (k=3)" in first.output
    assert f"oodbench report {tiny.parent / 'out'}" in first.output

    again = invoke("run", str(tiny), "--no-progress")
    assert again.exit_code == 0, again.output
    assert "0 to run, 10 already finished" in again.output
    assert "cells: 10 already finished" in again.output and "10 ok" not in again.output

    report = invoke("report", str(tiny.parent / "out"), "--hist", "small_cnn:knn")
    assert report.exit_code == 0, report.output
    html = tiny.parent / "out" / "report.html"
    assert f"report: {html}" in report.output.replace("\n", "")
    assert html.read_text().count("ID against OOD scores") >= 2


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace('name = "msp"', 'name = "mps"'),
         "unknown detector 'mps'. Did you mean 'msp'"),
        (lambda t: t.replace('"data/noise"', '"data/nosie"'),
         "data/nosie does not exist; expected a folder of OOD images (flat, or in sub-folders)"),
        (lambda t: t.replace("batch_size = 16", "batch_size = -1"), "batch_size: must be a positive integer"),
    ],
)
def test_user_errors_are_one_line_with_the_fix(tiny, edit, expected):
    tiny.write_text(edit(tiny.read_text()))
    result = invoke("run", str(tiny))
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.output


def test_missing_experiment_and_results_paths(tmp_path):
    result = invoke("run", str(tmp_path / "exp.toml"))
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: experiment file {tmp_path / 'exp.toml'} does not exist; "
                                     "pass the path of a TOML experiment file (see examples/experiment.toml)")
    result = invoke("report", str(tmp_path))
    assert result.exit_code == 2 and "no results in" in result.output
    result = invoke("report", str(tmp_path), "--hist", "nocolon")
    assert result.exit_code == 2 and "--hist takes MODEL:DETECTOR" in result.output


def test_exit_status_counts_failed_cells(tiny):
    """0 when every cell is ok (or already finished), 1 with the count when any cell failed."""
    add_model(tiny, "nan_cnn")  # a second model whose 10 cells fail at run time (NaN logits)
    result = invoke("run", str(tiny), "--no-progress")
    assert result.exit_code == 1, result.output
    assert "cells: 10 ok, 10 failed" in result.output
    assert "10 of 20 cells failed" in result.output
    again = invoke("run", str(tiny), "--no-progress")  # the failed cells run (and fail) again
    assert again.exit_code == 1, again.output
    assert "10 failed, 10 already finished" in again.output


def test_ctrl_c_exits_130_with_one_line_saying_what_was_kept(tiny):
    """Issue 23 item 4: Ctrl-C exited 1, the status of "a cell failed"; it is 130, with one line
    that says what was kept and how to resume, and the re-run resumes."""
    add_model(tiny, "interrupting_cnn")  # the second model's first forward pass is a Ctrl-C
    result = invoke("run", str(tiny), "--no-progress")
    assert result.exit_code == 130, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("interrupted: ")]
    assert lines == [
        f"interrupted: 10 of the 20 cells left to run finished and are kept in "
        f"{tiny.parent / 'out' / 'results'}; the activations extracted so far are "
        f"cached; run `oodbench run {tiny}` again to resume"], result.output
    assert "Traceback" not in result.output and "Aborted" not in result.output
    assert not (tiny.parent / "out" / "failures.log").exists()  # an interrupt is not a failure
    dry = invoke("run", str(tiny), "--dry-run")
    assert "10 to run, 10 already finished" in dry.output


def test_exit_codes_are_documented():
    for text in (invoke("run", "--help").output, (REPO / "README.md").read_text()):
        flat = " ".join(text.split())
        assert "exit status" in flat.lower()
        for code in ("0", "1", "2", "130"):
            assert f"{code}:" in flat or f"{code} " in flat or f"`{code}`" in flat
        assert "interrupted" in flat


def test_a_read_only_results_folder(tiny, monkeypatch):
    """A finished experiment re-runs and reports to another folder without writing; work that
    needs the folder stops before any forward pass with one line that names the fix."""
    first = invoke("run", str(tiny), "--no-progress")
    assert first.exit_code == 0, first.output
    out = tiny.parent / "out"
    before = snapshot(out)
    elsewhere = tiny.parent / "report-elsewhere"
    with read_only(out, monkeypatch):
        again = invoke("run", str(tiny), "--no-progress")
        report = invoke("report", str(out))
        report_elsewhere = invoke("report", str(out), "--out", str(elsewhere))
        tiny.write_text(tiny.read_text().replace('name = "energy"', 'name = "maxlogit"'))
        more = invoke("run", str(tiny), "--no-progress")
    assert again.exit_code == 0, again.output
    assert "cells: 10 already finished" in again.output
    assert report.exit_code == 2, report.output
    assert report.output.strip().startswith(f"error: cannot write the report in {out}")
    assert "--out" in report.output and "Traceback" not in report.output
    assert report_elsewhere.exit_code == 0, report_elsewhere.output
    assert (elsewhere / "report.html").is_file()
    assert more.exit_code == 2, more.output
    assert more.output.splitlines()[-1].startswith(
        f"  - [experiment].output: NotWritableError: cannot write the results in {out}")
    assert "output" in more.output.splitlines()[-1]
    assert snapshot(out) == before  # nothing was written, nothing was touched


def test_dry_run_finds_what_would_fail_later(tiny):
    (tiny.parent / "data" / "empty" / "x").mkdir(parents=True)
    text = tiny.read_text().replace('"data/noise"', '"data/empty"').replace("window = 1", "window = 5")
    tiny.write_text(text)
    dry = invoke("run", str(tiny), "--dry-run")
    assert dry.exit_code == 2, dry.output
    assert "2 problems; nothing was extracted" in dry.output
    assert "benchmark 'sets': EmptyInputError" in dry.output
    assert "benchmark 'cood': InvalidInputError: window=5 is larger than the 2 OOD classes" in dry.output
    assert not (tiny.parent / "cache").exists()
    run = invoke("run", str(tiny), "--no-progress")
    assert run.exit_code == 2 and "2 problems; nothing was extracted" in run.output


def test_dry_run_reports_every_problem_in_one_pass(tiny, monkeypatch):
    """Issue 23 item 6: a held_out_fraction that withholds every class and a read-only output
    folder passed the dry run ("checks passed"); of two wrong paths only the first was named."""
    text = tiny.read_text().replace('"data/noise"', '"data/nosie"').replace(
        '"data/stripes"', '"data/stirpes"')
    tiny.write_text(text)
    both = invoke("run", str(tiny), "--dry-run")
    assert both.exit_code == 2, both.output
    flat = " ".join(both.output.split())
    assert "2 paths of the experiment do not exist" in flat
    assert "data/nosie does not exist" in flat and "data/stirpes does not exist" in flat

    tiny.write_text(text.replace("nosie", "noise").replace("stirpes", "stripes") + (
        '\n[[detectors]]\nname = "react"\ntune = { protocol = "held_out_classes", '
        'held_out_fraction = 0.999, space = { percentile = [80, 90] } }\n'))
    out = tiny.parent / "out"
    out.mkdir()
    with read_only(out, monkeypatch):
        dry = invoke("run", str(tiny), "--dry-run")
    assert dry.exit_code == 2, dry.output
    flat = " ".join(dry.output.split())
    assert "2 problems; nothing was extracted" in flat and "checks passed" not in flat
    assert f"[experiment].output: NotWritableError: cannot write the results in {out}" in flat
    assert ("[[detectors]] #5 (react).tune on [id].fit: InvalidInputError: "
            "held_out_fraction=0.999 of 3 classes withholds 3") in flat
    assert list(out.iterdir()) == [] and not (tiny.parent / "cache").exists()


def test_progress_without_a_terminal_is_a_line_per_stage(tiny):
    """Issue 23 item 9: progress bars wrapped into garbage when output was not a terminal (the
    runner's output here is not one): one line per cell and two per extraction instead."""
    result = invoke("run", str(tiny))
    assert result.exit_code == 0, result.output
    assert "cell 1/10: small_cnn · cood · msp\n" in result.output
    assert "cell 10/10: " in result.output
    assert "extract oodbench:small_cnn(num_classes=3,width=64) on id_test: 18 images ..." in result.output
    bars = [line for line in result.output.splitlines()
            if line.startswith(("cells ", "extract ")) and "━" in line]
    assert not bars, bars  # no bar redrawn into the output


def test_configurations_are_labelled_the_same_way_everywhere(tiny):
    """Issue 23 item 5: --dry-run listed a knn tuned over k = [1, 2] with the class default
    k=50, the leaderboard gave no sign of tuning, and the terminal leaderboard dropped the
    [openood] tag that the HTML report showed. One label everywhere: the values (or the
    search space still to search), preset, fit data and tuning protocol."""
    text = tiny.read_text().split("[[detectors]]")[0]
    text = text.replace('[[benchmarks]]\ntype = "cood"', '[[unused]]\ntype = "cood"')
    text = "\n".join(line for line in text.splitlines()
                     if not line.startswith(("[[unused]]", "type = \"cood\"", "name = \"cood\"",
                                             "pool =", "window =", "n_levels =")))
    text += ('\n[[detectors]]\nname = "msp"\nprotocol = "openood"\n'
             '\n[[detectors]]\nname = "knn"\ntune = { protocol = "ood_val", '
             'ood = { folder = "data/noise" }, space = { k = [1, 2] } }\n')
    tiny.write_text(text)
    dry = invoke("run", str(tiny), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "  small_cnn · sets · msp [openood]\n" in dry.output
    assert ("  small_cnn · sets · knn (fit_fraction=1.0, seed=0, k in [1, 2]) "
            "[fit on train, tuned by ood_val]\n") in dry.output
    assert "k=50" not in dry.output
    run = invoke("run", str(tiny), "--no-progress")
    assert run.exit_code == 0, run.output
    from oodbench.results.table import ResultsTable

    rows = ResultsTable(tiny.parent / "out").read()
    chosen = rows[rows["detector"] == "knn"]["tuning"].iloc[0]["best_params"]["k"]
    tuned = f"knn (k={chosen}) [fit on train, tuned by ood_val]"
    assert tuned in run.output and "msp [openood]" in run.output  # the terminal leaderboard
    report = invoke("report", str(tiny.parent / "out"))
    assert report.exit_code == 0, report.output
    page = (tiny.parent / "out" / "report.html").read_text()
    summary = (tiny.parent / "out" / "report.md").read_text()
    for shown in (page, summary):
        assert tuned in shown and "msp [openood]" in shown


def test_warnings_are_one_line_without_source_paths(tiny):
    """Issue 23 item 9: LargeKWarning printed the source path and line of the warning (the real
    command, in a subprocess: pytest records warnings instead of printing them)."""
    import os
    import subprocess
    import sys

    text = tiny.read_text().split("[[detectors]]")[0] + '[[detectors]]\nname = "knn"\nhyperparams = { k = 3 }\n'
    tiny.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "oodbench", "run", str(tiny), "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "k=3 is 12.5%" in line]
    assert lines and all(line.startswith("warning: detector 'knn': k=3 is 12.5% of its 24-row bank")
                         for line in lines), done.stderr
    assert "_stats.py" not in done.stderr and "warnings.warn(" not in done.stderr
