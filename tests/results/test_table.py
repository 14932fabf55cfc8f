"""The tidy results table: schema, wide -> long, append, dedupe, finished cells, score arrays,
typed nested columns, the current experiment, an older results.parquet read and migrated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from oodbench.errors import DataError, InvalidInputError
from oodbench.params import Params
from oodbench.results import table as rt
from oodbench.results.table import ResultsTable


def wide_rows(detector: str = "msp") -> pd.DataFrame:
    """A wide benchmark result: two OOD sets and an OpenOOD-style aggregate row."""
    return pd.DataFrame(
        [
            {"detector": detector, "hyperparams": "{}", "group": "inat", "kind": "far",
             "is_average": False, "n_id": 10, "n_ood": 5, "auroc": 0.9, "fpr95_id": 0.3},
            {"detector": detector, "hyperparams": "{}", "group": "ssb", "kind": "near",
             "is_average": False, "n_id": 10, "n_ood": 7, "auroc": 0.7, "fpr95_id": 0.6},
            {"detector": detector, "hyperparams": "{}", "group": "all", "kind": "all",
             "is_average": True, "n_id": 10, "n_ood": 12, "auroc": 0.8, "fpr95_id": 0.45},
        ]
    )


def long_rows(cell: str = "c1", time: str = "2024-01-01T00:00:00", detector: str = "msp") -> pd.DataFrame:
    return rt.from_wide(wide_rows(detector), model="m", benchmark="b", cell=cell, seconds=1.5,
                        time=time, experiment="e")


def test_from_wide_is_long_with_the_schema_and_drops_aggregates():
    rows = long_rows()
    assert list(rows.columns) == list(rt.COLUMNS)
    assert {str(c): str(t) for c, t in rows.dtypes.items()} == rt.SCHEMA
    # 2 sets x 2 metrics; the 'all' mean row is derived and not stored
    assert len(rows) == 4
    assert set(rows["group"]) == {"inat", "ssb"}
    got = rows.set_index(["group", "metric"])["value"]
    assert got[("inat", "auroc")] == 0.9 and got[("ssb", "fpr95_id")] == 0.6
    assert rows["status"].eq("ok").all() and rows["n_ood"].tolist() == [5, 7, 5, 7]
    versions = rows["versions"].iloc[0]
    assert isinstance(versions, Params) and "numpy" in versions and "python" in versions


def test_from_wide_keeps_cood_level_and_severity():
    wide = pd.DataFrame([{"detector": "msp", "hyperparams": "{}", "group": "level_2", "level": 2,
                          "severity": 0.71, "percentile": 0.5, "n_id": 4, "n_ood": 3, "auroc": 0.6}])
    rows = rt.from_wide(wide, model="m", benchmark="cood", cell="c", seconds=0.0, time="t")
    assert rows["level"].tolist() == [2, 2, 2]
    assert dict(zip(rows["metric"], rows["value"])) == {"severity": 0.71, "percentile": 0.5, "auroc": 0.6}


def test_empty_wide_result_is_an_error():
    with pytest.raises(InvalidInputError, match="no rows"):
        rt.from_wide(pd.DataFrame(columns=["detector", "group"]), model="m", benchmark="b",
                     cell="c", seconds=0, time="t")


def test_conform_rejects_missing_columns_and_bad_status():
    with pytest.raises(InvalidInputError, match="cell"):
        rt.conform(pd.DataFrame({"model": ["m"]}))
    bad = long_rows().assign(status="done")
    with pytest.raises(InvalidInputError, match="status"):
        rt.conform(bad)


def test_append_read_and_finished_cells(tmp_path):
    table = ResultsTable(tmp_path)
    assert table.read().empty and list(table.read().columns) == list(rt.COLUMNS)
    table.append(long_rows("c1"))
    failed = rt.status_row(model="m", detector="knn", hyperparams="{}", benchmark="b", cell="c2",
                           status="failed", error="ValueError: boom", seconds=0.1, time="t1")
    skipped = rt.status_row(model="m", detector="neglabel", hyperparams="{}", benchmark="b",
                            cell="c3", status="skipped", error="needs CLIP", seconds=0.0, time="t1")
    table.append(pd.concat([failed, skipped]))
    rows = table.read()
    assert len(rows) == 6
    assert table.finished_cells() == {"c1", "c3"}  # failed cells run again
    assert table.is_finished("c1") and not table.is_finished("c2")
    assert rows.loc[rows["cell"] == "c2", "error"].item() == "ValueError: boom"
    assert not [p for p in table.path.iterdir() if p.name.startswith(".tmp-")]  # no temp left
    assert sorted(p.name for p in table.path.glob("cell-*")) == [
        "cell-c1.parquet", "cell-c2.parquet", "cell-c3.parquet"]  # one file per cell


def test_a_new_attempt_replaces_the_old_one(tmp_path):
    table = ResultsTable(tmp_path)
    failed = rt.status_row(model="m", detector="msp", hyperparams="{}", benchmark="b", cell="c1",
                           status="failed", error="boom", seconds=0.1, time="2024-01-01T00:00:00")
    table.append(failed)
    table.append(long_rows("c1", time="2024-01-02T00:00:00"))
    latest = table.read()
    assert set(latest["status"]) == {"ok"} and len(latest) == 4
    assert len(table.read(latest=False)) == 5  # history is kept on disk
    assert table.finished_cells() == {"c1"}


def test_dedupe_drops_exact_duplicates():
    rows = pd.concat([long_rows(), long_rows()], ignore_index=True)
    assert len(rt.dedupe(rows)) == 4


def test_scores_round_trip(tmp_path):
    table = ResultsTable(tmp_path)
    assert table.load_scores("c1") is None
    ood = {"level_0": np.array([0.1, 0.2]), "a group/with slash": np.array([0.5])}
    table.save_scores("c1", np.array([0.9, 0.8, 0.7]), ood)
    id_scores, groups = table.load_scores("c1")
    np.testing.assert_array_equal(id_scores, [0.9, 0.8, 0.7])
    assert list(groups) == list(ood)
    for name in ood:
        np.testing.assert_array_equal(groups[name], ood[name])


def test_a_damaged_table_says_how_to_recover(tmp_path):
    (tmp_path / rt.FILE_NAME).write_bytes(b"not parquet")
    with pytest.raises(DataError, match="Move it away"):
        ResultsTable(tmp_path).read()


def test_a_damaged_part_is_named_and_leaves_the_other_cells_writable(tmp_path):
    """Appending and looking up a cell read nothing of the other cells: a damaged part does not
    stop them; reading the whole table names the damaged file."""
    table = ResultsTable(tmp_path)
    table.append(long_rows("c1"))
    (table.path / "cell-c1.parquet").write_bytes(b"not parquet")
    table.append(long_rows("c2"))
    assert table.is_finished("c2")
    with pytest.raises(DataError, match="cell-c1.parquet.*Move the damaged file"):
        table.read()


def test_to_wide_inverts_from_wide():
    rows = pd.concat([long_rows("c1"), long_rows("c2", detector="energy")], ignore_index=True)
    failed = rt.status_row(model="m", detector="knn", hyperparams="{}", benchmark="b", cell="c3",
                           status="failed", error="boom", seconds=0.1, time="t")
    wide = rt.to_wide(pd.concat([rows, failed], ignore_index=True))
    assert len(wide) == 4 and set(wide["detector"]) == {"msp", "energy"}
    original = wide_rows()
    mine = wide[wide["detector"] == "msp"].set_index("group")
    for _, row in original[~original["is_average"]].iterrows():
        assert mine.loc[row["group"], "auroc"] == row["auroc"]
        assert mine.loc[row["group"], "fpr95_id"] == row["fpr95_id"]
        assert mine.loc[row["group"], "kind"] == row["kind"]


def test_interval_columns_become_ci_low_and_ci_high_of_their_metric():
    wide = pd.DataFrame({"detector": ["msp", "msp"], "group": ["a", "b"], "n_id": [5, 5],
                         "n_ood": [4, 4], "auroc": [0.9, 0.8], "auroc_ci_low": [0.85, 0.7],
                         "auroc_ci_high": [0.95, 0.9], "fpr95_id": [0.3, 0.4]})
    long = rt.from_wide(wide, model="m", benchmark="b", cell="c", seconds=1.0, time="t")
    assert set(long["metric"]) == {"auroc", "fpr95_id"}  # bounds are not metrics
    auroc = long[long["metric"] == "auroc"].set_index("group")
    assert auroc.loc["a", "ci_low"] == 0.85 and auroc.loc["b", "ci_high"] == 0.9
    assert long[long["metric"] == "fpr95_id"][["ci_low", "ci_high"]].isna().all().all()
    back = rt.to_wide(long)
    assert back["auroc_ci_low"].tolist() == [0.85, 0.7] and "fpr95_id_ci_low" not in back


def test_nested_columns_keep_their_types_through_the_store(tmp_path):
    """Hyper-parameters and the tuning record come back as typed mappings (an int stays an int,
    a float a float, a bool a bool, a list a hashable list); on disk they are Parquet JSON columns and
    the versions a map<string, string>, decoded once by the store."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wide = wide_rows().assign(hyperparams=[{"k": 5, "percentile": 90.0, "clip": True,
                                            "std": [0.5, 0.25], "fit_data": "train"}] * 3)
    tuning = {"protocol": "held_out_classes", "best_params": {"k": 5}, "best_value": 0.75}
    rows = rt.from_wide(wide, model="m", benchmark="b", cell="c1", seconds=1.0, time="t",
                        tuning=tuning)
    table = ResultsTable(tmp_path)
    table.append(rows)
    back = table.read()
    hyper, record = back["hyperparams"].iloc[0], back["tuning"].iloc[0]
    assert hyper == {"k": 5, "percentile": 90.0, "clip": True, "std": [0.5, 0.25],
                     "fit_data": "train"}
    assert [type(hyper[k]) for k in ("k", "percentile", "clip")] == [int, float, bool]
    assert hyper["std"] == [0.5, 0.25] and hash(hyper["std"]) == hash((0.5, 0.25))
    assert record["best_params"] == {"k": 5} and record["protocol"] == "held_out_classes"
    assert back["versions"].iloc[0] == rows["versions"].iloc[0]
    schema = pq.read_schema(table.path / "cell-c1.parquet")
    assert schema.field("hyperparams").type == pa.json_()
    assert schema.field("tuning").type == pa.json_()
    assert schema.field("versions").type == pa.map_(pa.string(), pa.string())
    # hashable: groups, pivots and de-duplicates like any key
    assert back.groupby("hyperparams")["value"].count().tolist() == [len(back)]


def test_the_current_experiment_decides_what_read_shows(tmp_path):
    table = ResultsTable(tmp_path)
    for cell in ("c1", "c2", "c3"):
        table.append(long_rows(cell))
    assert table.current_cells() is None and set(table.read()["cell"]) == {"c1", "c2", "c3"}
    assert table.set_experiment(["c1", "c2"], "first")
    assert not table.set_experiment(["c2", "c1"], "first")  # the same cells: nothing written
    view = table.view()
    assert set(view.rows["cell"]) == {"c1", "c2"} and view.earlier == 1
    assert view.note == ("1 cell from an earlier version of this experiment is kept but not "
                         "shown: --all to include them")
    table.set_experiment(["c3"], "second")
    assert set(table.read()["cell"]) == {"c3"} and table.earlier_cells() == 2
    every = table.view(include_earlier=True)
    assert set(every.rows["cell"]) == {"c1", "c2", "c3"} and "are included" in every.note
    labels = every.rows.drop_duplicates("cell").set_index("cell")["benchmark"]
    assert labels["c3"] == "b"
    assert labels["c1"].startswith("b [earlier version, run ") and labels["c1"] == labels["c2"]
    assert set(table.read(cells=["c1"])["cell"]) == {"c1"}  # exactly these, whatever is current
    assert table.finished_cells() == {"c1", "c2", "c3"}  # finished cells stay finished


def test_an_older_results_parquet_is_read_then_moved_into_the_store(tmp_path, capsys):
    """A folder of oodbench before the store (one results.parquet, nested fields as JSON text)
    reads as it is; the first append moves its cells into the store and says so in one line."""
    old = long_rows("c1")
    as_text = old.assign(**{c: [v.text for v in old[c]] for c in rt.NESTED})
    as_text.to_parquet(tmp_path / rt.FILE_NAME, index=False)
    table = ResultsTable(tmp_path)
    before = table.read()
    pd.testing.assert_frame_equal(before, old)
    assert table.is_finished("c1") and table.finished_cells() == {"c1"}
    assert not table.path.exists()  # reading wrote nothing
    table.append(long_rows("c2"))
    line = capsys.readouterr().err.strip()
    assert line == (f"results: moved the 1 cells of {tmp_path / rt.FILE_NAME} into {table.path} "
                    "(one file per cell); the old file is kept as results.parquet.migrated")
    assert not (tmp_path / rt.FILE_NAME).exists() and (tmp_path / rt.MIGRATED_NAME).is_file()
    after = table.read()
    pd.testing.assert_frame_equal(after[after["cell"] == "c1"].reset_index(drop=True), old)
    assert table.finished_cells() == {"c1", "c2"}
