"""The results column ``fit_transform`` (the transform a detector's fit data was read with):
written by ``from_wide``, and empty in the rows of a store written before it existed."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from oodbench.results import table as rt
from oodbench.results.columns import ARROW_SCHEMA
from oodbench.results.store import to_arrow
from oodbench.results.table import ResultsTable


def _rows(cell: str, **options: str) -> pd.DataFrame:
    wide = pd.DataFrame([{"detector": "mood", "hyperparams": "{}", "group": "sun", "n_id": 4,
                          "n_ood": 3, "auroc": 0.8}])
    return rt.from_wide(wide, model="m", benchmark="b", cell=cell, seconds=0.0,
                        time="2026-01-01T00:00:00", **options)


def test_from_wide_records_the_fit_transform() -> None:
    assert _rows("c", fit_transform="mood_train")["fit_transform"].tolist() == ["mood_train"]
    assert _rows("c")["fit_transform"].tolist() == [""]  # outside an experiment: not recorded


def test_a_part_written_before_the_column_reads_back_without_a_value(tmp_path) -> None:
    table = ResultsTable(tmp_path)
    table.append(_rows("new", fit_transform="mood_train"))
    old = to_arrow(_rows("old"))
    old = old.drop_columns(["fit_transform"])  # a part of an earlier oodbench
    assert "fit_transform" not in old.schema.names and "fit_transform" in ARROW_SCHEMA.names
    pq.write_table(old, table.path / "cell-old.parquet")
    rows = table.read().set_index("cell")
    assert rows.loc["new", "fit_transform"] == "mood_train"
    assert pd.isna(rows.loc["old", "fit_transform"])
