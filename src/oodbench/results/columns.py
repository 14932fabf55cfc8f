"""The columns of the long results table and their types, in memory and on disk.

One row per model x detector x benchmark x OOD group x metric. ``hyperparams``, ``tuning`` and
``versions`` are nested: in a DataFrame they hold :class:`oodbench.params.Params` values
(typed, hashable mappings; an empty one for "not tuned"); on disk ``hyperparams`` and
``tuning`` are Parquet JSON columns (their keys and value types differ from one detector to the
next, so no one struct fits every cell) and ``versions`` a ``map<string, string>``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from oodbench.errors import InvalidInputError
from oodbench.params import Params, params

#: column -> pandas dtype of the long table, in order
SCHEMA: dict[str, str] = {
    "model": "string",
    "detector": "string",
    "hyperparams": "object",  # Params: every hyper-parameter of the configuration
    "benchmark": "string",
    "group": "string",  # OOD group (a named set, or "level_3" for a C-OOD severity level)
    "kind": "string",  # near / far, "" when the benchmark does not say
    "level": "Int64",  # C-OOD severity level (0 = easiest), <NA> elsewhere
    "metric": "string",
    "value": "float64",
    "n_id": "Int64",
    "n_ood": "Int64",
    "status": "string",  # ok / failed / skipped
    "error": "string",
    "cell": "string",  # key of the (model, detector config, benchmark) cell
    "seconds": "float64",  # wall time of the cell
    "time": "string",  # UTC ISO-8601 time the cell finished (one value per attempt)
    "versions": "object",  # Params: package -> version that produced the row
    "experiment": "string",
    # provenance of the number: how it was made
    "preset": "string",  # detector protocol preset ("paper", "openood", "cood", ...), "" = none
    "fit_data": "string",  # what the detector was fitted on ("train", "id_val", "none", ...)
    # the transform its fit data was read with ("eval", "mood_train"; "" = fits on no data, or
    # not recorded: rows written before the column existed, or outside an experiment)
    "fit_transform": "string",
    "tuning": "object",  # Params: tuning protocol and chosen hyper-parameters; empty = not tuned
    "seed": "Int64",  # the benchmark's seed (C-OOD split), <NA> when it has none
    # uncertainty of ``value`` (95 % confidence interval; <NA> when not computed)
    "ci_low": "float64",
    "ci_high": "float64",
}
COLUMNS = tuple(SCHEMA)
STATUSES = ("ok", "failed", "skipped")
#: columns that hold ``Params``
NESTED = ("hyperparams", "tuning", "versions")
#: what every row must have
REQUIRED = frozenset({"model", "detector", "benchmark", "cell", "status", "time"})

#: (``large_string``: the type pandas' Arrow-backed strings already have, so none is converted)
_ARROW_SCALARS = {"string": pa.large_string(), "Int64": pa.int64(), "float64": pa.float64()}
#: the Arrow (Parquet) type of each column on disk
ARROW_SCHEMA = pa.schema([
    (c, pa.json_() if c in ("hyperparams", "tuning") else
     pa.map_(pa.string(), pa.string()) if c == "versions" else _ARROW_SCALARS[t])
    for c, t in SCHEMA.items()
])


def empty() -> pd.DataFrame:
    """An empty table with the full schema."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SCHEMA.items()})


def as_params(values: pd.Series) -> pd.Series:
    """A column of ``Params`` from mappings, JSON text (older files, CSVs) or missing values
    (empty ``Params``); each distinct text is decoded once."""
    decoded: dict[str, Params] = {}

    interned: dict[Params, Params] = {}

    def convert(value: Any) -> Params:
        if isinstance(value, str):
            if value not in decoded:
                decoded[value] = params(value)
            return decoded[value]
        converted = params(value)
        return interned.setdefault(converted, converted)  # equal values: one object

    return pd.Series([convert(v) for v in values], index=values.index, dtype=object)


def conforms(rows: pd.DataFrame) -> bool:
    """Whether ``rows`` already have exactly the schema's columns, dtypes and ``Params``."""
    return (tuple(rows.columns) == COLUMNS
            and all(str(t) == SCHEMA[c] for c, t in rows.dtypes.items())
            and all(isinstance(v, Params) for c in NESTED for v in rows[c]))


def conform(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with exactly the schema's columns and dtypes (missing optional ones filled;
    nested columns as ``Params``, decoded from JSON text once per distinct value)."""
    missing = REQUIRED - set(rows.columns)
    if missing:
        raise InvalidInputError(
            f"results rows lack the column(s) {', '.join(sorted(missing))}; every row needs "
            f"{', '.join(sorted(REQUIRED))}"
        )
    bad = set(rows["status"].dropna().unique().tolist()) - set(STATUSES)
    if bad:
        raise InvalidInputError(f"results status must be one of {STATUSES}; got {sorted(bad)}")
    columns: dict[str, pd.Series] = {}
    for column, dtype in SCHEMA.items():
        if column in NESTED:
            given = rows[column] if column in rows.columns else pd.Series(None, index=rows.index)
            columns[column] = as_params(given)
        elif column in rows.columns:
            given = rows[column]
            columns[column] = given if str(given.dtype) == dtype else given.astype(dtype)
        else:
            missing_value = np.nan if dtype == "float64" else pd.NA
            columns[column] = pd.Series(missing_value, index=rows.index, dtype=dtype)
    return pd.DataFrame(columns).reset_index(drop=True)
