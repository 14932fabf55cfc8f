"""What appending a cell and looking one up cost as a results table grows to the C-OOD paper's
scale, in the per-cell store and in the single-file table it replaced.

The C-OOD paper's scope with this tool's detectors is about 20,000 cells (525 models x ~40
detectors) of 66 rows each (11 severity levels x 6 metrics). Each synthetic cell has the real
schema (``from_wide`` of an 11-level C-OOD result: hyper-parameters, package versions, a tuning
record on every tenth cell) and goes through what a run does with it: ``is_finished(cell)``,
then ``append(rows)``. Timed per block of ``--block`` cells; then the whole table is read back
(``read()``: every row, latest attempts, nested columns decoded) and ``finished_cells()``.

The single-file table (oodbench before the store: ``append`` reads and rewrites the whole
``results.parquet``, ``is_finished`` reads it all) is run the same way, side by side, until a
block takes longer than ``--legacy-limit`` seconds.

Prints a table; writes ``speed/results/bench_results_store.json``.

    python speed/bench_results_store.py                 # 20,000 cells
    python speed/bench_results_store.py --cells 2000 --block 200 --no-legacy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodbench.params import to_text
from oodbench.results import table as rt
from oodbench.results.table import ResultsTable

RESULTS = Path(__file__).resolve().parent / "results" / "bench_results_store.json"
LEVELS = 11
METRICS = ("auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out", "severity")
N_DETECTORS = 40


def templates(seed: int = 0) -> list[pd.DataFrame]:
    """The long rows of one cell per detector (66 rows: 11 levels x 6 metrics)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(N_DETECTORS):
        wide = pd.DataFrame({"detector": f"det{d}", "group": [f"level_{i}" for i in range(LEVELS)],
                             "level": range(LEVELS), "n_id": 12_500, "n_ood": 12_500,
                             **{m: rng.random(LEVELS) for m in METRICS}})
        wide["hyperparams"] = [{"k": d, "percentile": 90.0 + d / 10, "fit_data": "train"}] * LEVELS
        tuning = ({"protocol": "held_out_classes", "best_params": {"k": d}, "best_value": 0.9}
                  if d % 10 == 0 else None)
        out.append(rt.from_wide(wide, model="m", benchmark="cood", cell="x", seconds=1.0,
                                time=rt.now(), experiment="bench", tuning=tuning))
    return out


def cell_rows(template: pd.DataFrame, i: int) -> tuple[str, pd.DataFrame]:
    key, n = f"{i:020x}", len(template)
    return key, template.assign(cell=pd.array([key] * n, dtype="string"),
                                model=pd.array([f"model{i // N_DETECTORS}"] * n, dtype="string"),
                                time=pd.array([rt.now()] * n, dtype="string"))


class LegacyTable:
    """oodbench's table before the store (f19c685): one ``results.parquet`` rewritten on every
    append, nested fields as JSON text, ``is_finished`` reading the whole file; without the
    dtype conversion its ``read`` also did, so if anything faster than it was."""

    def __init__(self, folder: Path):
        self.path = folder / "results.parquet"

    @staticmethod
    def _as_text(rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(**{c: [to_text(v) for v in rows[c]] for c in rt.NESTED})

    def read(self, latest: bool = True) -> pd.DataFrame:
        if not self.path.exists():
            return pd.DataFrame(columns=list(rt.COLUMNS))
        table = pd.read_parquet(self.path)
        return rt.dedupe(table) if latest else table

    def append(self, rows: pd.DataFrame) -> None:
        new = self._as_text(rows)
        old = self.read(latest=False)
        table = new if old.empty else pd.concat([old, new], ignore_index=True)
        tmp = self.path.with_suffix(".tmp")
        table.to_parquet(tmp, index=False)
        os.replace(tmp, self.path)

    def is_finished(self, cell: str) -> bool:
        table = self.read()
        return cell in set(table[table["status"].isin(["ok", "skipped"])]["cell"])


def run(table: Any, cells: int, block: int, limit: float | None) -> dict[str, Any]:
    """Look up and append ``cells`` cells; seconds per block (stops after a block over
    ``limit``)."""
    parts = templates()
    blocks: list[float] = []
    done = 0
    for first in range(0, cells, block):
        spent = 0.0  # the store's calls only, not making the synthetic rows
        for i in range(first, min(first + block, cells)):
            key, rows = cell_rows(parts[i % N_DETECTORS], i)
            t0 = time.perf_counter()
            if not table.is_finished(key):
                table.append(rows)
            spent += time.perf_counter() - t0
        blocks.append(spent)
        done = min(first + block, cells)
        print(f"  {type(table).__name__}: {done} cells, last block {blocks[-1]:.2f} s", flush=True)
        if limit is not None and blocks[-1] > limit:
            break
    return {"cells": done, "block": block, "block_seconds": blocks,
            "append_and_lookup_seconds": sum(blocks)}


def read_back(table: ResultsTable, cells: int) -> dict[str, float]:
    t0 = time.perf_counter()
    rows = table.read()
    t1 = time.perf_counter()
    finished = table.finished_cells()
    t2 = time.perf_counter()
    assert len(rows) == cells * LEVELS * len(METRICS), len(rows)
    assert len(finished) == cells and rows["cell"].nunique() == cells
    return {"read_seconds": t1 - t0, "finished_cells_seconds": t2 - t1, "rows": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--block", type=int, default=1_000)
    parser.add_argument("--legacy-block", type=int, default=100)
    parser.add_argument("--legacy-limit", type=float, default=10.0,
                        help="stop the single-file table after a block slower than this (s; "
                             "10 s per 100 cells: 20,000 cells would take over an hour)")
    parser.add_argument("--no-legacy", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        print(f"store: {args.cells} cells of {LEVELS * len(METRICS)} rows", flush=True)
        store = ResultsTable(Path(tmp) / "store")
        new = run(store, args.cells, args.block, None)
        new.update(read_back(store, args.cells))
        new["files"] = len(os.listdir(store.path))
        legacy = None
        if not args.no_legacy:
            print("single-file table (before the store)", flush=True)
            legacy = run(LegacyTable(Path(tmp)), args.cells, args.legacy_block, args.legacy_limit)

    blocks = new["block_seconds"]
    print(f"\n{'cells':>8}  {'store s/block':>14}  {'single file s/block':>20}  (blocks of "
          f"{args.block} / {args.legacy_block} cells)")
    legacy_at = ({(i + 1) * args.legacy_block: s for i, s in enumerate(legacy["block_seconds"])}
                 if legacy else {})
    for i, seconds in enumerate(blocks):
        n = (i + 1) * args.block
        old = legacy_at.get(n)
        print(f"{n:>8}  {seconds:>14.2f}  {'' if old is None else f'{old:>20.2f}'}")
    if legacy:
        for n, seconds in legacy_at.items():
            if n < args.block:
                print(f"{n:>8}  {'':>14}  {seconds:>20.2f}")
    ratio = blocks[-1] / blocks[0]
    print(f"\nstore: {args.cells} cells appended and looked up in "
          f"{new['append_and_lookup_seconds']:.1f} s; last block / first block = {ratio:.2f}; "
          f"read() of {new['rows']:,} rows {new['read_seconds']:.2f} s, finished_cells() "
          f"{new['finished_cells_seconds']:.2f} s; {new['files']} files in the store")
    if legacy:
        per_cell = [s / args.legacy_block for s in legacy["block_seconds"]]
        print(f"single file: stopped at {legacy['cells']} cells; per cell {per_cell[0] * 1e3:.1f} ms "
              f"(first block) -> {per_cell[-1] * 1e3:.1f} ms (last)")
    record = {"benchmark": "bench_results_store", "python": platform.python_version(),
              "machine": platform.machine(), "cpus": os.cpu_count(),
              "rows_per_cell": LEVELS * len(METRICS), "store": new, "single_file": legacy,
              "last_over_first_block": ratio}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
