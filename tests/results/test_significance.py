"""Leaderboard differences tested on the kept scores; error bars on severity curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oodbench.metrics import evaluate
from oodbench.metrics.delong import mean_auroc_test
from oodbench.results import leaderboard as lb
from oodbench.results import plots
from oodbench.results import table as rt
from oodbench.results.report import write_report
from oodbench.results.significance import compare_cells, versus_above


def write_cells(folder: Path, benchmark: str, groups: list[str], shifts: dict[str, float],
                seed: int = 0) -> dict[str, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """One model, one cell per detector; rows computed from the very scores that are kept."""
    rng = np.random.default_rng(seed)
    table = rt.ResultsTable(folder)
    base_id = rng.normal(1.0, 1, 300)
    base_ood = {g: rng.normal(0, 1, 200) for g in groups}
    kept = {}
    for det, shift in shifts.items():
        id_scores = base_id + rng.normal(0, 0.05, 300)  # detectors agree closely
        ood = {g: v + shift + rng.normal(0, 0.05, v.size) for g, v in base_ood.items()}
        rows = []
        for i, g in enumerate(groups):
            row = {"detector": det, "group": g, "n_id": 300, "n_ood": 200,
                   **evaluate(id_scores, ood[g], ci=True)}
            row.update({"level": i} if benchmark == "cood" else {"kind": "far"})
            rows.append(row)
        cell = f"{benchmark}-{det}"
        table.append(rt.from_wide(pd.DataFrame(rows), model="m", benchmark=benchmark, cell=cell,
                                  seconds=1.0, time="2024-01-01T00:00:00"))
        table.save_scores(cell, id_scores, ood)
        kept[det] = (id_scores, ood)
    return kept


def test_neighbours_are_tested_on_the_kept_scores(tmp_path: Path) -> None:
    kept = write_cells(tmp_path, "sets", ["inat", "ssb"],
                       {"good": 0.0, "same": 0.005, "worse": 0.6})
    table = rt.ResultsTable(tmp_path)
    rows = table.read()
    board = lb.leaderboard(rows, "sets")
    assert set(board["detector"].iloc[:2]) == {"good", "same"} and board["detector"].iloc[2] == "worse"
    second = board["detector"].iloc[1]
    marks = versus_above(rows, "sets", board, table)
    assert marks[0] == "" and marks[1].endswith("(n.s.)") and "(n.s.)" not in marks[2]
    direct = mean_auroc_test(kept["worse"], kept[second])  # fixed OOD sets: paired throughout
    assert marks[2].startswith(f"{direct.difference:+.4f}")
    test = compare_cells(table, "sets-worse", f"sets-{second}", severity=False)
    assert test.p_value == pytest.approx(direct.p_value) and test.se == pytest.approx(direct.se)
    assert test.difference == pytest.approx(
        board["auroc"].iloc[2] - board["auroc"].iloc[1], abs=1e-12)  # the leaderboard's means
    files = write_report(tmp_path)
    html, md = files.html.read_text(), files.markdown.read_text()
    assert "vs above (DeLong)" in html and "(n.s.)" in html
    assert "vs above (DeLong)" in md and "(n.s.)" in md


def test_severity_levels_are_not_paired_on_the_ood_side(tmp_path: Path) -> None:
    kept = write_cells(tmp_path, "cood", ["level_0", "level_1", "level_2"],
                       {"a": 0.0, "b": 0.3})
    table = rt.ResultsTable(tmp_path)
    test = compare_cells(table, "cood-b", "cood-a", severity=True)
    expected = mean_auroc_test(kept["b"], kept["a"], paired_groups=False)
    assert test.se == pytest.approx(expected.se) and test.se != pytest.approx(
        mean_auroc_test(kept["b"], kept["a"]).se)
    assert compare_cells(table, "cood-a", "missing", severity=True) is None


def test_severity_curves_carry_error_bars(tmp_path: Path) -> None:
    write_cells(tmp_path, "cood", ["level_0", "level_1", "level_2"], {"a": 0.0, "b": 0.3})
    rows = rt.ResultsTable(tmp_path).read()
    auroc = rows[(rows["metric"] == "auroc") & (rows["detector"] == "a")].sort_values("level")
    fig = plots.severity_curves(rows, "cood", "m")
    bars = fig.axes[0].containers
    assert len(bars) == 2 and all(c.has_yerr for c in bars)
    line, _, (segments,) = bars[0] if bars[0].get_label() == "a" else bars[1]
    spans = [seg[:, 1] for seg in segments.get_segments()]  # each bar from ci_low to ci_high
    # the bars' ends are the stored interval ends (estimate -/+ the stored widths): an ulp apart
    np.testing.assert_allclose([s.min() for s in spans], auroc["ci_low"], rtol=1e-12)
    np.testing.assert_allclose([s.max() for s in spans], auroc["ci_high"], rtol=1e-12)
