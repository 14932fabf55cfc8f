"""The catalogue of published tables: ``_tables/catalogue.toml`` and one CSV per table.

Every table is a file of rows, one row per published value, with the columns of
``ROW_COLUMNS`` (the keys that decide what a value can be compared with) followed by any
columns of the source's own shape (``printed``). Every cell is read as text, so a value stays
exactly as printed ("96.36", "71.1", "57.40"); empty cells are empty strings. The file's
sha256 is checked against the catalogue every time it is read.

How a table's rows are read is its ``loader``, an entry of :data:`LOADERS` (the registry of
table loaders: a name, the catalogue keys a table of it ``needs``, and its behaviour, ``read``).
The C-OOD table (``loader = "cood"``) is not a CSV here: it is the official
``all_paper_results.csv`` that :mod:`oodbench.results.paper` bundles and checksums, turned into
rows of the same columns (one per model x confidence function x severity level, AUROC as the
file prints it), followed by the file's own columns; its ``printed`` form is the file itself.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import pandas as pd
from pydantic import Field

from oodbench.errors import CacheError, DataError, InvalidInputError, UnknownNameError
from oodbench.registry import Registry
from oodbench.schema import NamedEntries, Schema, package_file, parse_toml

CATALOGUE_FILE = "catalogue.toml"


@dataclass(frozen=True)
class TableLoader:
    """One registry entry: how the rows of a published table are read (``read(info)``, a
    frame of :data:`ROW_COLUMNS` then the source's own columns) and which catalogue keys a
    table read this way ``needs``. It has no settings of its own (``settings``: ``None``)."""

    name: str
    description: str
    read: Callable[[TableInfo], pd.DataFrame]
    needs: frozenset[str] = frozenset()
    settings: None = None


#: every table loader, by the name a catalogue entry's ``loader`` gives
LOADERS: Registry[TableLoader] = Registry("table loader")

#: the columns every row has, in order; what each holds:
ROW_COLUMNS: dict[str, str] = {
    "method": "the method as the source prints it",
    "detector": "the oodbench detector that computes the score ('' = none in oodbench)",
    "preset": "the oodbench preset whose configuration is the published one ('' = not stated)",
    "hyperparams": "JSON of hyper-parameters a results row must have too ('' = none beyond the preset)",
    "training": "how the backbone was trained (loss, method)",
    "backbone": "the architecture, as the source names it",
    "weights": "oodbench model specs that load exactly these weights, ';'-separated ('' = none); "
               "'SPEC + FILE' where the spec's loader reads the released checkpoint FILE (the "
               "model name an experiment records)",
    "train_data": "what the backbone was trained on",
    "additional_data": "data beyond the ID training set the method used ('' = none stated)",
    "fit_data": "what the detector was fitted on: train, id_val, none ('' = not stated)",
    "tuning": ("tuning protocol, by oodbench's registered name: none, ood_val, "
               "held_out_classes, held_out_paper, noise, fgsm ('' = not stated)"),
    "tuning_detail": "the tuning protocol in words (its OOD validation set, its search)",
    "benchmark": "the oodbench benchmark name ('' = none in oodbench)",
    "id_set": "the ID test set in words",
    "ood_set": "the OOD group: a set ('sun'), OpenOOD's mean ('near', 'far'), 'level_3'; '' = ID only",
    "metric": "the oodbench metric name (auroc, fpr95_id, fpr95_ood, id_accuracy)",
    "unit": "'%' or 'fraction'",
    "value": "the value exactly as printed",
    "paper": "the paper (arXiv id or address)",
    "paper_table": "the paper's table that prints the value",
    "read_from": "where the value was read",
    "settings_from": "where the row's settings were read",
    "note": "what else a reader must know",
}


@dataclass(frozen=True)
class TableInfo:
    """One catalogue entry: what the table is, where it comes from, how it was measured."""

    name: str
    title: str
    paper: str
    source: str
    metrics: str
    loader: str = "csv"
    file: str = ""
    sha256: str = ""
    paper_title: str = ""
    #: results-table column -> the value every row of the table was measured with
    protocol: Mapping[str, int] = field(default_factory=dict)
    #: protocol column -> what it is, in words
    labels: Mapping[str, str] = field(default_factory=dict)
    #: how to print the source's own table (columns, values, read_from, missing)
    printed: Mapping[str, Any] = field(default_factory=dict)
    #: "weights": a results row is only compared with the rows of its own weights (tables of
    #: many models, like C-OOD's); "" (default): with every row of its detector and OOD set
    compare_by: str = ""

    def __post_init__(self) -> None:
        if self.loader not in LOADERS:
            raise InvalidInputError(f"table {self.name!r} has loader {self.loader!r}; use one of "
                                    f"{tuple(LOADERS)}")
        missing = [key for key in sorted(LOADERS[self.loader].needs) if not getattr(self, key)]
        if missing:
            raise InvalidInputError(f"table {self.name!r} needs {' and '.join(missing)}")


class Catalogue(Schema):
    """``catalogue.toml``: one ``[tables.<name>]`` entry per :class:`TableInfo`."""

    tables: NamedEntries[TableInfo] = Field(default_factory=dict)


def parse_catalogue(text: str, file: str = CATALOGUE_FILE) -> dict[str, TableInfo]:
    """The tables of a catalogue in the format of ``catalogue.toml`` (``ConfigError`` naming
    ``file``, the table and the key)."""
    return parse_toml(Catalogue, text, file=file).tables


@lru_cache(maxsize=1)
def tables() -> dict[str, TableInfo]:
    """Every table of the catalogue, by name, in catalogue order."""
    text, file = package_file("oodbench.published", f"_tables/{CATALOGUE_FILE}")
    return parse_catalogue(text, file)


def table_info(name: str) -> TableInfo:
    """The catalogue entry of ``name`` (``UnknownNameError`` with the closest names)."""
    known = tables()
    if name not in known:
        raise UnknownNameError("published table", name, known)
    return known[name]


def table_bytes(info: TableInfo) -> bytes:
    """The bytes of a CSV table, checked against the catalogue's sha256."""
    path = resources.files("oodbench.published").joinpath("_tables", info.file)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"published table {info.name!r}: {info.file} cannot be read ({err}); "
                        "reinstall oodbench") from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != info.sha256:
        raise CacheError(
            f"published table {info.name!r}: {info.file} has sha256 {digest}, the catalogue says "
            f"{info.sha256}. If you edited the file on purpose, put the new sha256 into "
            f"{CATALOGUE_FILE}; otherwise reinstall oodbench"
        )
    return data


def _csv_rows(info: TableInfo) -> pd.DataFrame:
    """The rows of a CSV table of this package (its sha256 checked)."""
    df = pd.read_csv(io.BytesIO(table_bytes(info)), dtype=str, keep_default_na=False)
    missing = [c for c in ROW_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"published table {info.name!r}: {info.file} lacks the columns {missing}")
    return df


@cache
def _rows(name: str) -> pd.DataFrame:
    info = table_info(name)
    df = LOADERS[info.loader].read(info)
    df.insert(0, "table", name)
    return df


def load(name: str) -> pd.DataFrame:
    """The rows of one published table as a DataFrame of strings (values as printed).

    Columns: ``table``, then ``ROW_COLUMNS``, then the source's own columns where the table
    keeps them.
    """
    return _rows(name).copy()


def load_all(names: list[str] | None = None) -> pd.DataFrame:
    """The rows of several tables (default: every table) in one frame, core columns only."""
    chosen = list(tables()) if names is None else names
    return pd.concat([_rows(n)[["table", *ROW_COLUMNS]] for n in chosen], ignore_index=True)


def select(df: pd.DataFrame, method: str | None = None) -> pd.DataFrame:
    """The rows of ``method`` (as printed; ``UnknownNameError`` with the closest names).

    ``df`` holds catalogue rows (:func:`load`), whose ``method`` column every table has. A
    printed table (:func:`printed`) names its rows by its own key columns instead: select its
    rows with ``printed(name, method=...)``.
    """
    if method is None:
        return df
    if "method" not in df.columns:
        raise InvalidInputError(
            f"these rows have no 'method' column (columns: {', '.join(map(str, df.columns))}): "
            "select catalogue rows (published.load(name)), or a printed table's rows with "
            "published.printed(name, method=...)"
        )
    rows = df[df["method"] == method]
    if rows.empty:
        raise UnknownNameError("published method", method, set(df["method"]))
    return rows


def with_printed_form() -> list[str]:
    """The tables whose source's own table :func:`printed` can print again."""
    return [name for name, info in tables().items() if info.printed]


def _value_matches(row: Mapping[str, str], where: list[str]) -> bool:
    """Whether a row holds the value of a printed column: ``[metric, ood_set]``, or
    ``[metric]`` for a source that prints one value per row whatever its OOD set."""
    metric, *ood_set = where
    return row["metric"] == metric and (not ood_set or row["ood_set"] == ood_set[0])


def printed(name: str, method: str | None = None) -> pd.DataFrame:
    """The table in its source's own shape and order, every cell as the source prints it.

    Only the rows read from the source (``printed.read_from`` when the table adds rows read
    elsewhere) are shown; a value the source leaves blank is ``printed.missing`` (default
    ``""``). ``method``: only the rows of this method (the catalogue's ``method`` column, as
    :func:`select` takes it), whatever the source's own key columns are. A table without a
    ``printed`` entry is an ``InvalidInputError`` naming the tables that have one.
    """
    info = table_info(name)
    spec = info.printed
    if not spec:
        raise InvalidInputError(
            f"published table {name!r} has no printed form (its source's own table); the "
            f"tables that have one: {', '.join(with_printed_form()) or 'none'}"
        )
    rows = select(_rows(name), method)
    if "read_from" in spec:
        rows = rows[rows["read_from"] == spec["read_from"]]
    values = {col: list(where) for col, where in spec["values"].items()}
    keys = [c for c in spec["columns"] if c not in values]
    needed = list(dict.fromkeys([*keys, "metric", "ood_set", "value"]))
    out: dict[tuple[str, ...], dict[str, str]] = {}
    for row in rows[needed].to_dict(orient="records"):
        key = tuple(row[k] for k in keys)
        record = out.setdefault(key, {**dict(zip(keys, key)),
                                      **{c: spec.get("missing", "") for c in values}})
        for col, where in values.items():
            if _value_matches(row, where):
                record[col] = row["value"]
    return pd.DataFrame(list(out.values()), columns=list(spec["columns"]))


def _cood_rows(info: TableInfo) -> pd.DataFrame:
    """The bundled C-OOD results as catalogue rows (AUROC per level, the file's own text),
    each followed by the file's own columns, every cell as the file prints it."""
    from oodbench.published import cood

    raw = pd.read_csv(io.BytesIO(cood.bundled_bytes()), dtype=str, keep_default_na=False)
    by_paper = {k.paper_name: k for k in cood.PAPER_KAPPAS}
    known = raw["confidence function"].isin(list(by_paper))
    raw = raw[known]
    kappas = raw["confidence function"].map(by_paper)
    n = len(raw)
    text = {c: [""] * n for c in ROW_COLUMNS}
    df = pd.DataFrame(text)
    df["method"] = raw["confidence function"].to_numpy()
    df["detector"] = [k.detector for k in kappas]
    configured = [k.published_row() for k in kappas]
    df["preset"] = [c["preset"] for c in configured]
    df["hyperparams"] = [c["hyperparams"] for c in configured]
    df["backbone"] = raw["model name"].to_numpy()
    df["weights"] = ("timm:" + raw["model name"]).to_numpy()
    df["training"] = "see the model's name (oodbench.results.model_tags)"
    df["train_data"] = "ImageNet-1k (and what the model's name says)"
    df["fit_data"] = "none"
    df["tuning"] = "none"
    df["tuning_detail"] = "fixed confidence functions (the paper's Sec. 5)"
    df["benchmark"] = "cood"
    df["id_set"] = "ImageNet-1k validation (50,000 images)"
    df["ood_set"] = ("level_" + raw["severity level"]).to_numpy()
    df["metric"] = "auroc"
    df["unit"] = "fraction"
    df["value"] = raw["ood-auroc"].to_numpy()
    df["paper"] = "arXiv 2302.11893"
    df["paper_table"] = "all_paper_results.csv (every model, kappa and level)"
    df["read_from"] = cood.PAPER_RESULTS_URL
    df["settings_from"] = "the paper's Sec. 4-5 and oodbench.results.paper.PAPER_KAPPAS"
    df["note"] = [k.note for k in kappas]
    # the file's own cells beside each row, as the CSV tables keep their source's columns:
    # its printed form (``printed("cood")`` is the file again, cell for cell)
    return pd.concat([df, raw.reset_index(drop=True)], axis=1)


LOADERS.add(TableLoader("csv", "a CSV file of this package, one row per published value, "
                        "checked against its sha256", _csv_rows, frozenset({"file", "sha256"})))
LOADERS.add(TableLoader("cood", "the C-OOD paper's all_paper_results.csv (bundled, checksummed) "
                        "as rows: one per model x confidence function x severity level",
                        _cood_rows))
