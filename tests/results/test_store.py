"""The per-cell results store: compaction, and what concurrent writers and a SIGKILL leave.

The writers are separate processes (``tests/results/_writer.py``) with small cells (4 rows) and
a compaction every 8 parts, so that merges happen, and race, within a few cells."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pandas as pd
import pytest

from oodbench.results import store
from oodbench.results.table import ResultsTable
from tests.conftest import REPO
from tests.results._writer import ROWS_PER_CELL, cell_rows


def writer(folder, mode: str, *keys: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.results._writer", str(folder), mode,
                             *keys], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])})


def cells_of(rows: pd.DataFrame) -> dict[str, int]:
    """Rows per cell."""
    return rows.groupby("cell").size().to_dict()


def test_parts_are_merged_into_a_batch_and_stay_readable(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "COMPACT_AT", 4)
    table = ResultsTable(tmp_path)
    for i in range(10):
        table.append(cell_rows(f"c{i}"))
    names = sorted(p.name for p in table.path.iterdir())
    assert sum(n.startswith("batch-") for n in names) == 2  # 4 + 4 merged, 2 parts left
    assert sum(n.startswith("cell-") for n in names) == 2
    assert cells_of(table.read()) == {f"c{i}": ROWS_PER_CELL for i in range(10)}
    assert all(table.is_finished(f"c{i}") for i in range(10))
    # a new attempt of a merged cell supersedes the merged one
    again = cell_rows("c0").assign(status="failed")
    table.append(again)
    assert not table.is_finished("c0") and "c0" not in table.finished_cells()
    assert set(table.read().query("cell == 'c0'")["status"]) == {"failed"}
    # the folder is a Parquet dataset other tools read as it is
    assert len(pd.read_parquet(table.path)) == 11 * ROWS_PER_CELL


def test_two_processes_append_into_one_folder(tmp_path):
    """200 cells each (and 25 both write) -> 425 cells, each once, nothing lost or doubled,
    with compactions running in both processes."""
    shared = [f"s{i}" for i in range(25)]
    a = writer(tmp_path, "append", *[f"a{i}" for i in range(200)], *shared)
    b = writer(tmp_path, "append", *shared, *[f"b{i}" for i in range(200)])
    outputs = [p.communicate(timeout=300)[0] for p in (a, b)]
    assert [p.returncode for p in (a, b)] == [0, 0]
    assert [len(o.split()) for o in outputs] == [225, 225]
    table = ResultsTable(tmp_path)
    expected = {f"{p}{i}" for p in "ab" for i in range(200)} | set(shared)
    assert cells_of(table.read()) == {c: ROWS_PER_CELL for c in expected}
    assert table.finished_cells() == expected
    stored = cells_of(pd.read_parquet(table.path))  # every attempt on disk
    assert {c: n for c, n in stored.items() if c not in shared} == {
        c: ROWS_PER_CELL for c in expected - set(shared)}  # written once: stored once
    assert all(stored[c] in (ROWS_PER_CELL, 2 * ROWS_PER_CELL) for c in shared)  # 1 or 2 attempts


@pytest.mark.parametrize("mode", ["hang-part", "hang-compaction"])
def test_a_writer_killed_mid_append_leaves_whole_cells(tmp_path, mode):
    """SIGKILL half-way through writing a part (half its temporary file on disk) or through a
    compaction (parts claimed, no batch yet): the table reads whole, every cell the writer
    reported is there with all its rows, and the next writer carries on."""
    proc = writer(tmp_path, mode, "k")
    reported = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "hanging":
            break
        reported.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    table = ResultsTable(tmp_path)
    found = cells_of(table.read())
    in_flight = f"k-{len(reported)}"  # its part may or may not have been written
    assert set(reported) <= set(found) <= set(reported) | {in_flight}
    assert set(found.values()) == {ROWS_PER_CELL}
    leftovers = [p.name for p in table.path.iterdir() if p.name.startswith((".tmp-", "claim-"))]
    assert leftovers  # what the kill interrupted is still there, and harmless
    table.append(cell_rows("after"))
    table.store.compact(at=1)  # merges the claims a killed compaction left
    assert cells_of(table.read()) == {**found, "after": ROWS_PER_CELL}
    assert not [p for p in table.path.iterdir() if p.name.startswith("claim-")]
