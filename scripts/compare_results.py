"""Compare two results folders value for value (e.g. the demo before and after a refactor).

    python scripts/compare_results.py BEFORE_DIR AFTER_DIR [--new-column NAME ...]

Reads each folder's results (``ResultsTable``: the per-cell store ``results/``, or the
``results.parquet`` of an oodbench before it, so a folder of each kind compare), and
``losses/`` when both have one; the nested columns (hyper-parameters, tuning record) as their
canonical JSON text. Drops the columns that record when and how long a run took (``seconds``,
``time``, ``versions``), orders the rows
by what identifies a row (model, benchmark, detector configuration, group, level, metric; the
cell key is left out because it holds the weights path, which differs between two folders),
and checks that every other column is identical, floats bit for bit
(NaN equal to NaN). Also compares the per-cell score files array for array, matched through
the rows (``scores/<cell>.npz``). Prints a line per
table and exits 1 on the first difference.

``--new-column NAME``: a column the code after the change adds (results written before it read
it back as missing): it must be missing in every row of BEFORE; its values in AFTER are printed,
not compared.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from oodbench.results.table import ResultsTable, with_text

#: columns that differ between two runs of the same experiment by nature (and ``cell``: its key
#: includes the weights file's path, so two output folders have different keys)
RUN_COLUMNS = ["seconds", "time", "versions", "cell"]
ORDER = ["model", "benchmark", "detector", "hyperparams", "group", "level", "metric"]


def rows_of(folder: Path) -> pd.DataFrame:
    """The rows of the experiment last run into ``folder``, nested columns as JSON text."""
    return with_text(ResultsTable(folder).read())


def load(folder: Path) -> pd.DataFrame:
    df = rows_of(folder).drop(columns=RUN_COLUMNS)
    return df.sort_values(ORDER, na_position="first").reset_index(drop=True)


def compare_tables(before: Path, after: Path, new: tuple[str, ...] = ()) -> list[str]:
    a, b = load(before), load(after)
    problems = []
    for column in new:
        if column in a and a[column].notna().any() and (a[column].astype(str) != "").any():
            problems.append(f"{before}: column {column!r} is not new: it holds values")
        counts = b[column].fillna("<missing>").replace("", "<empty>").value_counts()
        print(f"{after}: new column {column!r}: " + ", ".join(f"{k} x {v}" for k, v in counts.items()))
        a, b = a.drop(columns=[column], errors="ignore"), b.drop(columns=[column])
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return problems + [f"{after}: columns or row count differ ({len(a)} vs {len(b)} rows)"]
    for column in a.columns:
        x, y = a[column], b[column]
        if pd.api.types.is_float_dtype(x):
            same = np.array_equal(x.to_numpy(), y.to_numpy(), equal_nan=True)
        else:
            same = bool((x.astype(object).where(x.notna(), "<NA>").astype(str)
                         == y.astype(object).where(y.notna(), "<NA>").astype(str)).all())
        if not same:
            problems.append(f"{after}: column {column!r} differs")
    return problems


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    """Arrays equal bit for bit (NaN equal to NaN for floats)."""
    floats = np.issubdtype(x.dtype, np.floating)
    return x.dtype == y.dtype and np.array_equal(x, y, equal_nan=floats)


def compare_scores(before: Path, after: Path) -> list[str]:
    """The score files of the same (model, benchmark, detector configuration) in both folders."""
    def by_config(folder: Path) -> dict[tuple[str, ...], Path]:
        rows = rows_of(folder).drop_duplicates("cell")
        return {(r.model, r.benchmark, r.detector, r.hyperparams): folder / "scores" / f"{r.cell}.npz"
                for r in rows.itertuples()}

    a, b = by_config(before), by_config(after)
    if set(a) != set(b):
        return [f"{after}: a different set of cells"]
    problems = []
    for config, path in a.items():
        other = b[config]
        if path.is_file() != other.is_file():
            problems.append(f"{other}: present in one folder only")
            continue
        if not path.is_file():
            continue
        with np.load(path) as x, np.load(other) as y:
            if sorted(x.files) != sorted(y.files) or not all(_same(x[k], y[k]) for k in x.files):
                problems.append(f"{other}: scores differ from {path}")
    return problems


def main(before: Path, after: Path, new: tuple[str, ...] = ()) -> int:
    problems: list[str] = []
    for sub in ("", "losses"):
        table_a, table_b = before / sub, after / sub
        if not ResultsTable(table_a).exists() and not ResultsTable(table_b).exists():
            continue
        found = compare_tables(table_a, table_b, new) + compare_scores(table_a, table_b)
        rows = len(rows_of(table_a))
        print(f"{table_b}: {rows} rows, {'identical' if not found else 'DIFFERENT'}")
        problems += found
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    new = tuple(args[i + 1] for i, a in enumerate(args[:-1]) if a == "--new-column")
    folders = [a for i, a in enumerate(args) if a != "--new-column"
               and (i == 0 or args[i - 1] != "--new-column")]
    if len(folders) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(folders[0]), Path(folders[1]), new))
