"""Issue 34: an experiment edited and re-run into the same output folder. Every view of the
folder (``oodbench report``, its terminal leaderboard, ``published compare``, ``paper rank``,
``ResultsTable.read`` / ``wide``) shows the cells of the experiment last run, value for value
what the run printed; the cells of its earlier versions stay on disk, are counted in one line
and come back, labelled, with ``--all``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from oodbench import published
from oodbench.cli.main import main
from oodbench.cli.report import leaderboard_frames
from oodbench.results import leaderboard as lb
from oodbench.results import wide
from oodbench.results.report import render_markdown
from oodbench.results.table import ResultsTable
from tests.run.tiny import write_tiny_experiment

MODEL = '[[models]]\nname = "{name}"\nfactory = "oodbench.models.small_cnn:SmallCNN"\n' \
        'options = {{ num_classes = 3, seed = {seed} }}\n'
COOD = ('[[benchmarks]]\ntype = "cood"\nname = "cood"\npool = { folder = "data/pool" }\n'
        "window = 1\nn_levels = 2\n")


def experiment(models=(("small_cnn", 0),), groups=("noise", "stripes"), cood=True,
               extra_benchmark=False, detectors=("msp", "energy", "knn:1"), msp_preset="") -> str:
    """The tiny experiment's TOML with the parts each edit changes."""
    text = ('[experiment]\nname = "edits"\noutput = "out"\ndevice = "cpu"\nbatch_size = 16\n\n'
            '[id]\ntest = { folder = "data/id_test" }\nfit = { folder = "data/id_train" }\n\n')
    text += "".join(MODEL.format(name=n, seed=s) for n, s in models)
    text += COOD if cood else ""
    text += '[[benchmarks]]\ntype = "custom"\nname = "sets"\n' + "".join(
        f'groups.{g} = {{ folder = "data/{g}", kind = "far" }}\n' for g in groups)
    if extra_benchmark:
        text += ('[[benchmarks]]\ntype = "custom"\nname = "more"\n'
                 'groups.noise = { folder = "data/noise", kind = "far" }\n')
    for det in detectors:
        name, _, k = det.partition(":")
        text += f'[[detectors]]\nname = "{name}"\n'
        text += f"hyperparams = {{ k = {k} }}\n" if k else ""
        text += f'preset = "{msp_preset}"\n' if name == "msp" and msp_preset else ""
    return text


#: each edit of the issue, applied in turn to the same folder
EDITS = [
    ("a changed hyper-parameter", {"detectors": ("msp", "energy", "knn:2")}),
    ("a removed detector", {"detectors": ("msp", "knn:2")}),
    ("an added detector", {"detectors": ("msp", "knn:2", "maxlogit")}),
    ("a removed group", {"detectors": ("msp", "knn:2", "maxlogit"), "groups": ("noise",)}),
    ("an added group", {"detectors": ("msp", "knn:2", "maxlogit"), "groups": ("noise", "pool")}),
    ("a removed benchmark", {"detectors": ("msp", "maxlogit"), "groups": ("noise",),
                             "cood": False}),
    ("an added benchmark", {"detectors": ("msp", "maxlogit"), "groups": ("noise",),
                            "cood": False, "extra_benchmark": True}),
    ("an added model", {"detectors": ("msp", "maxlogit"), "groups": ("noise",),
                        "models": (("small_cnn", 0), ("other_cnn", 1))}),
    ("a removed model", {"detectors": ("msp", "maxlogit"), "groups": ("noise",),
                         "models": (("other_cnn", 1),)}),
    ("a changed preset", {"detectors": ("msp", "maxlogit"), "groups": ("noise",),
                          "models": (("other_cnn", 1),), "msp_preset": "openood"}),
]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


def table_lines(output: str) -> list[str]:
    """The leaderboard tables a command printed: titles and rows."""
    lines = output.splitlines()
    return [line for i, line in enumerate(lines)
            if line.startswith("│") or (i + 1 < len(lines) and lines[i + 1].startswith("┏"))]


@pytest.fixture
def folder(tmp_path, monkeypatch, one_thread) -> Path:
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    write_tiny_experiment(tmp_path)
    return tmp_path


def test_each_edit_rerun_into_the_same_folder_shows_the_new_experiment(folder):
    toml, out = folder / "edits.toml", folder / "out"
    table = ResultsTable(out)
    seen: dict[str, pd.DataFrame] = {}  # every cell's rows, as the run that made them gave them
    steps = [("the first version", {})] + EDITS
    for what, edit in steps:
        toml.write_text(experiment(**edit))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = invoke("run", str(toml), "--no-progress", "--top", "50")
        assert run.exit_code == 0, (what, run.output)
        from oodbench.run import prepare

        keys = {c.key for c in prepare(toml).plan.cells}
        rows = table.read(cells=keys)  # the rows `oodbench run` printed its leaderboard from
        if what == "the first version":  # the untrained CNN is at chance in every cell: once
            chance = [str(w.message) for w in caught if "at chance level" in str(w.message)]
            assert len(chance) == 1 and chance[0].endswith(f"(in {len(keys)} of {len(keys)} cells)")
        for cell, cell_rows in rows.groupby("cell"):
            seen.setdefault(str(cell), cell_rows.reset_index(drop=True))
        earlier = set(seen) - keys

        # the tables only: the figures of each report are tested in tests/results/test_report.py
        report = invoke("report", str(out), "--top", "50", "--format", "table", "--no-figures")
        assert report.exit_code == 0, (what, report.output)
        assert table_lines(report.output) == table_lines(run.output), what  # value for value
        view = table.view()
        assert set(view.rows["cell"]) == keys and view.earlier == len(earlier), what
        pd.testing.assert_frame_equal(view.rows, rows)
        pd.testing.assert_frame_equal(wide(table.read()), wide(rows))
        summary = (out / "report.md").read_text()
        assert summary == render_markdown(rows, title="edits", table=table, note=view.note), what
        n_ok = rows.drop_duplicates("cell")["status"].eq("ok").sum()
        assert summary.startswith(f"# edits\n\n{n_ok} cells finished, 0 failed"), what
        line = (f"{len(earlier)} cells from an earlier version of this experiment are kept but "
                "not shown: --all to include them")
        for output in (run.output, report.output):
            assert (line in output) == bool(earlier), (what, output)

        # --all: the earlier cells come back, labelled, with the values their run gave
        every = table.read(include_earlier=True)
        back = every[~every["cell"].isin(keys)]
        assert set(back["cell"]) == earlier, what
        assert back["benchmark"].str.contains(r" \[earlier version").all(), what
        for cell, cell_rows in back.groupby("cell"):
            values = cell_rows.drop(columns="benchmark").reset_index(drop=True)
            pd.testing.assert_frame_equal(values, seen[str(cell)].drop(columns="benchmark"))
        titles = [title for _, title, _, _ in leaderboard_frames(every, top=None)]
        assert sum("[earlier version, run " in str(t) for t in titles) == len(
            set(back["benchmark"])), what  # each earlier benchmark under its own label
        if what == "a removed benchmark":  # once through the command line
            shown = invoke("report", str(out), "--all", "--top", "50", "--format", "table",
                           "--no-figures")
            assert "cood [earlier version, run " in shown.output, shown.output
            assert "are included, labelled [earlier version, ...]" in shown.output

        # published compare and paper rank read the same cells
        compared = invoke("published", "compare", str(out), "--format", "json")
        assert compared.exit_code == 0, (what, compared.output)
        shown_rows = json.loads(compared.output[:compared.output.rindex("]") + 1])
        expected = published.compare(rows)
        key = ["model", "detector", "benchmark", "group", "metric", "yours", "table"]
        assert sorted(tuple(r[k] for k in key) for r in shown_rows) == sorted(
            expected[key].itertuples(index=False, name=None)), what
        ranked = invoke("paper", "rank", str(out), "--allow-mismatch", "--format", "json")
        if "cood" in set(rows["benchmark"]):
            assert ranked.exit_code == 0, (what, ranked.output)
            ranked_rows = json.loads(ranked.output[:ranked.output.rindex("]") + 1])
            cood = wide(rows[rows["benchmark"] == "cood"])
            assert len(ranked_rows) == len(cood), what
            assert {r["detector"] for r in ranked_rows} == set(cood["detector"]), what
        else:
            assert ranked.exit_code == 2 and "no C-OOD rows" in ranked.output, what
        for bench in lb.benchmarks(rows):  # the leaderboard averages this version's groups only
            board = lb.leaderboard(view.rows, bench)
            groups = rows[(rows["benchmark"] == bench) & (rows["metric"] == "auroc")]
            assert set(board["groups"]) == {groups["group"].nunique()}, what
