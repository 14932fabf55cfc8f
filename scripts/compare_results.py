"""Compare two results folders value for value (e.g. the demo before and after a refactor).

    python scripts/compare_results.py BEFORE_DIR AFTER_DIR

Reads ``results.parquet`` (and ``losses/results.parquet`` when both have one), drops the columns
that record when and how long a run took (``seconds``, ``time``, ``versions``), orders the rows
by cell, metric and group, and checks that every other column is identical, floats bit for bit
(NaN equal to NaN). Also compares every ``scores/*.npz`` file array for array. Prints a line per
table and exits 1 on the first difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: columns that differ between two runs of the same experiment by nature
RUN_COLUMNS = ["seconds", "time", "versions"]
ORDER = ["cell", "metric", "group", "level"]


def load(path: Path) -> pd.DataFrame:
    df = pd.read_parquet(path).drop(columns=RUN_COLUMNS)
    return df.sort_values(ORDER, na_position="first").reset_index(drop=True)


def compare_tables(before: Path, after: Path) -> list[str]:
    a, b = load(before), load(after)
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"{after}: columns or row count differ ({len(a)} vs {len(b)} rows)"]
    problems = []
    for column in a.columns:
        x, y = a[column], b[column]
        if pd.api.types.is_float_dtype(x):
            same = np.array_equal(x.to_numpy(), y.to_numpy(), equal_nan=True)
        else:
            same = bool((x.fillna("<NA>").astype(str) == y.fillna("<NA>").astype(str)).all())
        if not same:
            problems.append(f"{after}: column {column!r} differs")
    return problems


def compare_scores(before: Path, after: Path) -> list[str]:
    names = sorted(p.name for p in before.glob("*.npz"))
    if names != sorted(p.name for p in after.glob("*.npz")):
        return [f"{after}: a different set of score files"]
    problems = []
    for name in names:
        with np.load(before / name) as x, np.load(after / name) as y:
            if sorted(x.files) != sorted(y.files) or not all(
                    np.array_equal(x[k], y[k], equal_nan=True) for k in x.files):
                problems.append(f"{after / name}: scores differ")
    return problems


def main(before: Path, after: Path) -> int:
    problems: list[str] = []
    for sub in ("", "losses"):
        table_a, table_b = before / sub / "results.parquet", after / sub / "results.parquet"
        if not table_a.is_file() and not table_b.is_file():
            continue
        found = compare_tables(table_a, table_b) + compare_scores(before / sub / "scores",
                                                                   after / sub / "scores")
        rows = len(pd.read_parquet(table_a))
        print(f"{table_b}: {rows} rows, {'identical' if not found else 'DIFFERENT'}")
        problems += found
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
