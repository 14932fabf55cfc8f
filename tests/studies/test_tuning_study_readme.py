"""The README's tuning-study section against studies/results/tuning_study.json: every
"mean ± std" figure of the section is the JSON's near / far AUROC over the held-out seeds,
recomputed here with the convention the section states (sample standard deviation), so the
README and the JSON cannot drift apart again."""

from __future__ import annotations

import json
import re
import statistics

import pytest

from tests._scripts import load_script
from tests.conftest import REPO

#: a cell of the table's "seeds 0-3" columns: near mean±std / far mean±std, M* [per seed]
SPREAD_CELL = re.compile(r"^(\d+\.\d\d)±(\d+\.\d\d) / (\d+\.\d\d)±(\d+\.\d\d), M\* \[([\d, ]+)\]$")
#: any "mean ± std" figure in the section's text (table cells and the bullets)
PAIR = re.compile(r"(\d+\.\d\d) ?± ?(\d+\.\d\d)")


@pytest.fixture(scope="module")
def study():
    return load_script("studies/tuning_study.py")


@pytest.fixture(scope="module")
def report():
    return json.loads((REPO / "studies" / "results" / "tuning_study.json").read_text())


@pytest.fixture(scope="module")
def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("**Tuning study**")
    return text[start:text.index("**Tuning study at CIFAR scale**", start)]


def _expected(study, report) -> dict[tuple[str, str], dict]:
    """(study label, kind) -> the "mean±std" strings of near and far AUROC in %, over the
    held-out rows of that kind (one per seed), std the sample standard deviation
    (statistics.stdev, n - 1), and M* per seed; recomputed here, not by the script."""
    out = {}
    for label in study.STUDY:
        for kind in ("last_block", "head"):
            held = [r for r in report["rows"]
                    if r["detector"] == label and r["protocol"].startswith(f"(b) {kind} seed ")]
            assert [r["tuning"]["seed"] for r in held] == report["seeds"], (label, kind)
            entry = {"m_star": [r["tuning"]["m_star"] for r in held]}
            for group in ("near", "far"):
                values = [100 * r[f"{group}_auroc"] for r in held]
                entry[group] = (f"{statistics.mean(values):.2f}", f"{statistics.stdev(values):.2f}")
            out[(label, kind)] = entry
    return out


def _table(section: str) -> tuple[list[str], list[list[str]]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return rows[0], rows[2:]  # header, separator, data rows


def test_the_section_states_the_spread_convention(study, section):
    assert study.SPREAD_DDOF == 1
    assert "std the sample standard deviation (ddof = 1)" in section


def test_every_table_spread_equals_the_json_recomputed(study, report, section):
    expected = _expected(study, report)
    header, rows = _table(section)
    columns = {kind: next(i for i, h in enumerate(header) if f"{kind}, seeds 0-3" in h)
               for kind in ("last_block", "head")}
    code_to_label = {code: label for label, code in study.STUDY.items()}
    seen = set()
    for row in rows:
        code = re.search(r"\(`(\w+)`\)", row[0]).group(1)
        label = code_to_label[code]
        for kind, col in columns.items():
            match = SPREAD_CELL.match(row[col])
            assert match, f"{row[0]}, {kind}: cell {row[col]!r} is not 'mean±std / mean±std, M* [...]'"
            near, far, m_star = match.group(1, 2), match.group(3, 4), match.group(5)
            want = expected[(label, kind)]
            assert (near, far) == (want["near"], want["far"]), (label, kind)
            assert [int(m) for m in m_star.split(",")] == want["m_star"], (label, kind)
            seen.add((label, kind))
    assert seen == set(expected)  # every detector's row, both kinds


def test_every_spread_in_the_text_is_one_of_the_json_figures(study, report, section):
    """The bullets repeat the table's figures: each "a ± b" of the section must be one of them."""
    allowed = {pair for entry in _expected(study, report).values() for pair in (entry["near"], entry["far"])}
    found = PAIR.findall(section)
    assert len(found) >= 4 * len(study.STUDY)  # the table alone: near and far of two kinds a row
    assert [p for p in found if p not in allowed] == []


def test_the_script_prints_the_same_spread(study, report):
    """seed_spread (the script's printed tables) uses the README's convention."""
    expected = _expected(study, report)
    for key, entry in study.seed_spread(report).items():
        for group in ("near", "far"):
            mean, std = entry[group]
            assert (f"{mean:.2f}", f"{std:.2f}") == expected[key][group], (key, group)
        assert entry["m_star"] == expected[key]["m_star"]


def test_the_parallel_run_check_is_recorded_and_matches_the_row(report):
    """The README says VRA+'s seed-0 last-block row was computed twice with identical results:
    the second run's figures are in the JSON and equal the row's."""
    check = report["vra_last_block_reproduced_in_parallel_run"]
    row = next(r for r in report["rows"]
               if r["detector"] == "VRA" and r["protocol"] == "(b) last_block seed 0")
    assert check["near_auroc"] == row["near_auroc"] and check["far_auroc"] == row["far_auroc"]
    assert check["m_star"] == row["tuning"]["m_star"]
    assert check["best_params"] == row["tuning"]["best_params"]
    assert "vra_last_block_reproduced_in_parallel_run" in report["notes"]
