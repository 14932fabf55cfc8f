"""A process that appends small synthetic cells to a results folder, for the concurrency and
SIGKILL tests (``python -m tests.results._writer FOLDER MODE [KEYS...]``).

Modes: ``append`` appends the given cell keys and prints each one once it is stored;
``hang-part`` appends ``<prefix>-0`` to ``<prefix>-4``, then stops half-way through the next
part (half of its temporary file written), prints ``hanging`` and waits to be killed;
``hang-compaction`` appends ``<prefix>-0``, ... until the first compaction, which it stops
after claiming the parts (no batch written yet).
"""

from __future__ import annotations

import functools
import sys
import time

import pandas as pd

#: merge after this many parts, so that compactions happen (and race) within a few cells
COMPACT_AT = 8
ROWS_PER_CELL = 4


@functools.lru_cache(maxsize=1)
def _template() -> pd.DataFrame:
    from oodbench.results import table as rt

    wide = pd.DataFrame({"detector": "msp", "hyperparams": [{"k": 1}] * 2, "group": ["a", "b"],
                         "n_id": 10, "n_ood": 5, "auroc": [0.9, 0.8], "fpr95_id": [0.1, 0.2]})
    return rt.from_wide(wide, model="m", benchmark="b", cell="", seconds=0.0, time="")


def cell_rows(key: str) -> pd.DataFrame:
    """Four ``ok`` rows (two groups x two metrics) of cell ``key``, finished now."""
    from oodbench.results.table import now

    n = len(_template())
    return _template().assign(cell=pd.array([key] * n, dtype="string"),
                              time=pd.array([now()] * n, dtype="string"))


def hang() -> None:
    print("hanging", flush=True)
    time.sleep(600)


def main(folder: str, mode: str, keys: list[str]) -> None:
    import pyarrow as pa

    from oodbench.results import store
    from oodbench.results.table import ResultsTable

    store.COMPACT_AT = COMPACT_AT
    table = ResultsTable(folder)
    if mode == "append":
        for key in keys:
            table.append(cell_rows(key))
            print(key, flush=True)
        return
    for i in range(5 if mode == "hang-part" else 0):
        table.append(cell_rows(f"{keys[0]}-{i}"))
        print(f"{keys[0]}-{i}", flush=True)
    if mode == "hang-part":  # the next part: half its bytes in the temporary file, then stop
        write_table = store.pq.write_table

        def half_written(rows: pa.Table, where: object, **options: object) -> None:
            sink = pa.BufferOutputStream()
            write_table(rows, sink, **options)  # type: ignore[arg-type]
            data = sink.getvalue().to_pybytes()
            with open(str(where), "wb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
            hang()

        store.pq.write_table = half_written  # type: ignore[assignment]
    if mode == "hang-compaction":  # claims made, then stop before the batch is written
        def claimed_only(self: store.CellStore, claimed: list[str]) -> pa.Table:
            hang()
            raise AssertionError("unreachable")

        store.CellStore._claimed_rows = claimed_only  # type: ignore[method-assign]
    for i in range(5 if mode == "hang-part" else 0, 10 * COMPACT_AT):
        table.append(cell_rows(f"{keys[0]}-{i}"))
        print(f"{keys[0]}-{i}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
