"""The tidy results table: one row per model x detector x benchmark x OOD group x metric.

Stored as ``<folder>/results.parquet`` (plus per-cell score arrays in ``<folder>/scores/``).
A *cell* is one (model, detector configuration, benchmark) triple; every row carries the key of
the cell that produced it, the time the cell finished and its status:

    ``ok``       the cell ran; one row per (group, metric)
    ``failed``   the cell raised; one row with the error message (``metric`` is empty)
    ``skipped``  the detector does not apply to the model; one row with the reason

Parquet files cannot be appended in place, so :meth:`ResultsTable.append` rewrites the file
through a temporary file and an atomic rename: a crash never leaves a half-written table.
Re-running a cell appends a new attempt; :func:`dedupe` keeps only the latest attempt of each
cell, and a cell counts as finished when its latest attempt is ``ok`` or ``skipped``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodbench.atomic_files import new_file_mode
from oodbench.errors import DataError, InvalidInputError, NotWritableError

#: column -> pandas dtype of the long table, in order
SCHEMA: dict[str, str] = {
    "model": "string",
    "detector": "string",
    "hyperparams": "string",  # canonical JSON (sorted keys)
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
    "versions": "string",  # JSON of the package versions that produced the row
    "experiment": "string",
    # provenance of the number: how it was made
    "preset": "string",  # detector protocol preset ("paper", "openood", "cood", ...), "" = none
    "fit_data": "string",  # what the detector was fitted on ("train", "id_val", "none", ...)
    "tuning": "string",  # JSON: tuning protocol and chosen hyper-parameters, "" = not tuned
    "seed": "Int64",  # the benchmark's seed (C-OOD split), <NA> when it has none
    # uncertainty of ``value`` (95 % confidence interval; <NA> when not computed)
    "ci_low": "float64",
    "ci_high": "float64",
}
COLUMNS = tuple(SCHEMA)
STATUSES = ("ok", "failed", "skipped")
FILE_NAME = "results.parquet"
SCORES_DIR = "scores"
#: unreadable images the extractions behind the results skipped (per source)
SKIPPED_FILE = "skipped_images.json"

#: wide-result columns that identify a row rather than measure something
_ID_COLUMNS = {"detector", "hyperparams", "group", "kind", "level", "n_id", "n_ood", "seed"}
#: wide columns ``<metric>_ci_low`` / ``<metric>_ci_high``: the interval of that metric's row
_INTERVAL_SUFFIXES = ("_ci_low", "_ci_high")
#: provenance columns a benchmark's wide rows may carry; passed through to every long row
_PROVENANCE = ("preset", "fit_data", "tuning")
_VERSIONED = ("oodbench", "torch", "torchvision", "timm", "numpy", "scikit-learn", "open_clip_torch")


def package_versions() -> str:
    """The versions of the packages that shape the numbers, as a JSON string."""
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return json.dumps(versions, sort_keys=True)


def _new_tmp(folder: Path, prefix: str, suffix: str) -> str:
    """A temporary file in ``folder`` with the permissions of a normal new file (the umask's)."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    os.close(fd)
    os.chmod(tmp, new_file_mode())
    return tmp


@contextlib.contextmanager
def _replaced(dest: Path, prefix: str) -> Iterator[str]:
    """A temporary file next to ``dest`` (with its suffix) for the block to write; renamed onto
    ``dest`` when the block succeeds, so a crash never leaves half a file. A failed write
    (read-only folder, full disk) is a ``NotWritableError``."""
    folder = dest.parent
    with writing(folder, "the results"):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = _new_tmp(folder, prefix, dest.suffix)
        try:
            yield tmp
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


#: how to get out of a read-only results folder, per writer
RESULTS_FIX = ("make it writable, or set [experiment] output to a writable folder (finished "
               "cells can be copied there with results.parquet)")


@contextlib.contextmanager
def writing(folder: Path, what: str, fix: str = RESULTS_FIX) -> Iterator[None]:
    """Turn a failed write (read-only folder, no space) into one ``NotWritableError`` line."""
    try:
        yield
    except OSError as err:
        reason = err.strerror or str(err)
        raise NotWritableError(f"cannot write {what} in {folder} ({reason}): {fix}") from err


def check_writable(folder: Path, what: str = "the results", fix: str = RESULTS_FIX, *,
                   create: bool = True) -> None:
    """Create ``folder`` if needed and a test file in it; ``NotWritableError`` when it cannot.

    ``create=False`` leaves no trace: the test file goes into ``folder`` or, when it does not
    exist yet, into its nearest existing parent (where it would be created).
    """
    with writing(folder, what, fix):
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        probe_dir = next(p for p in (folder, *folder.parents) if p.is_dir())
        fd, probe = tempfile.mkstemp(prefix=".oodbench-write-check-", dir=probe_dir)
        os.close(fd)
        os.unlink(probe)


def now() -> str:
    """The current UTC time in ISO-8601 with microseconds (sorts as text)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def empty() -> pd.DataFrame:
    """An empty table with the full schema."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SCHEMA.items()})


def conform(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with exactly the schema's columns and dtypes (missing optional ones filled)."""
    required = {"model", "detector", "benchmark", "cell", "status", "time"}
    missing = required - set(rows.columns)
    if missing:
        raise InvalidInputError(
            f"results rows lack the column(s) {', '.join(sorted(missing))}; every row needs "
            f"{', '.join(sorted(required))}"
        )
    bad = set(rows["status"].dropna().unique()) - set(STATUSES)
    if bad:
        raise InvalidInputError(f"results status must be one of {STATUSES}; got {sorted(bad)}")
    out = pd.DataFrame(index=rows.index)
    for column, dtype in SCHEMA.items():
        if column in rows.columns:
            out[column] = rows[column].astype(dtype)
        else:
            missing_value = np.nan if dtype == "float64" else pd.NA
            out[column] = pd.Series(missing_value, index=rows.index, dtype=dtype)
    return out.reset_index(drop=True)


def from_wide(
    wide: pd.DataFrame,
    *,
    model: str,
    benchmark: str,
    cell: str,
    seconds: float,
    time: str,
    experiment: str = "",
    versions: str | None = None,
) -> pd.DataFrame:
    """Turn a benchmark's wide result (one row per detector x group) into long ``ok`` rows.

    ``<metric>_ci_low`` / ``<metric>_ci_high`` columns become the ``ci_low`` / ``ci_high`` of
    that metric's row. Every other numeric column that does not identify the row (``auroc``,
    ``fpr95_id``, C-OOD's ``severity`` score and ``percentile``, mean kappas, ...) becomes one
    ``(metric, value)`` row;
    non-numeric extras are dropped, and so are aggregate rows (``is_average``: OpenOOD's near /
    far / all means), which :mod:`oodbench.results.leaderboard` recomputes from the groups.
    """
    if "is_average" in wide.columns:  # derived means (OpenOOD near/far/all): recomputed by reports
        wide = wide[~wide["is_average"].astype(bool)]
    if wide.empty:
        raise InvalidInputError(
            f"benchmark {benchmark!r} returned no rows for model {model!r}; it has no OOD group"
        )
    interval_columns = {c for c in wide.columns if c.endswith(_INTERVAL_SUFFIXES)}
    metric_columns = [
        c
        for c in wide.columns
        if c not in _ID_COLUMNS and c not in interval_columns
        and pd.api.types.is_numeric_dtype(wide[c]) and not pd.api.types.is_bool_dtype(wide[c])
    ]
    base = pd.DataFrame(
        {
            "detector": wide["detector"].astype(str),
            "hyperparams": wide["hyperparams"].astype(str) if "hyperparams" in wide else "{}",
            "group": wide["group"].astype(str),
            "kind": wide["kind"].astype(str) if "kind" in wide else "",
            "level": wide["level"] if "level" in wide else pd.NA,
            "n_id": wide["n_id"] if "n_id" in wide else pd.NA,
            "n_ood": wide["n_ood"] if "n_ood" in wide else pd.NA,
            "seed": wide["seed"] if "seed" in wide else pd.Series(pd.NA, index=wide.index, dtype="Int64"),
            **{c: wide[c].astype(str) if c in wide else "" for c in _PROVENANCE},
        }
    )
    long = base.join(wide[metric_columns]).melt(
        id_vars=list(base.columns), value_vars=metric_columns, var_name="metric", value_name="value"
    )
    for bound, suffix in zip(("ci_low", "ci_high"), _INTERVAL_SUFFIXES):  # metric by metric
        long[bound] = np.concatenate([
            wide[f"{m}{suffix}"].to_numpy(dtype=float) if f"{m}{suffix}" in wide
            else np.full(len(wide), np.nan) for m in metric_columns
        ])
    long = long.assign(
        model=model, benchmark=benchmark, cell=cell, seconds=float(seconds), time=time,
        status="ok", error="", experiment=experiment,
        versions=versions if versions is not None else package_versions(),
    )
    return conform(long)


def to_wide(table: pd.DataFrame) -> pd.DataFrame:
    """The ``ok`` rows back in the benchmarks' wide shape: one row per (model, detector
    configuration, benchmark, group), one column per metric (e.g. for ``paper.rank``) and
    ``<metric>_ci_low`` / ``<metric>_ci_high`` where rows carry intervals."""
    ok = table[table["status"] == "ok"]
    keys = ["model", "detector", "hyperparams", "benchmark", "group", "kind", "level", "n_id", "n_ood"]
    wide = ok.pivot_table(index=keys, columns="metric", values="value", aggfunc="first",
                          dropna=False, observed=True)
    wide = wide.dropna(how="all")
    for bound, suffix in zip(("ci_low", "ci_high"), _INTERVAL_SUFFIXES):
        known = ok[ok[bound].notna()]
        if len(known):
            extra = known.pivot_table(index=keys, columns="metric", values=bound, aggfunc="first",
                                      dropna=False, observed=True).dropna(how="all")
            wide = wide.join(extra.add_suffix(suffix))
    wide = wide.reset_index()
    wide.columns.name = None
    return wide


def status_row(
    *,
    model: str,
    detector: str,
    hyperparams: str,
    benchmark: str,
    cell: str,
    status: str,
    error: str,
    seconds: float,
    time: str,
    experiment: str = "",
    versions: str | None = None,
) -> pd.DataFrame:
    """One row recording a ``failed`` or ``skipped`` cell and why."""
    row = {
        "model": model, "detector": detector, "hyperparams": hyperparams, "benchmark": benchmark,
        "group": "", "kind": "", "metric": "", "value": np.nan, "status": status, "error": error,
        "cell": cell, "seconds": float(seconds), "time": time, "experiment": experiment,
        "versions": versions if versions is not None else package_versions(),
    }
    return conform(pd.DataFrame([row]))


def dedupe(table: pd.DataFrame) -> pd.DataFrame:
    """Keep only the latest attempt of every cell (and drop exact duplicate rows)."""
    if table.empty:
        return table.reset_index(drop=True)
    latest = table.groupby("cell")["time"].transform("max")
    kept = table[table["time"] == latest]
    keys = ["cell", "group", "metric", "time"]
    return kept.drop_duplicates(subset=keys, keep="last").reset_index(drop=True)


class ResultsTable:
    """The results of one output folder: ``results.parquet`` and ``scores/<cell>.npz``.

    >>> table = ResultsTable("results/")          # doctest: +SKIP
    >>> table.append(rows); table.read()          # doctest: +SKIP
    """

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self.path = self.folder / FILE_NAME
        self.scores_dir = self.folder / SCORES_DIR

    def __repr__(self) -> str:
        return f"ResultsTable({str(self.folder)!r})"

    # -- rows ---------------------------------------------------------------------------------
    def read(self, *, latest: bool = True) -> pd.DataFrame:
        """Every row (only each cell's latest attempt when ``latest``); empty when none yet."""
        if not self.path.exists():
            return empty()
        try:
            table = pd.read_parquet(self.path)
        except Exception as err:  # pyarrow raises several types for a damaged file
            raise DataError(
                f"cannot read the results table {self.path}: {err}. Move it away to start a "
                "fresh table (finished cells will then run again)"
            ) from err
        table = conform(table)
        return dedupe(table) if latest else table

    def append(self, rows: pd.DataFrame) -> None:
        """Add ``rows`` (conformed to the schema) and rewrite the file atomically."""
        if rows.empty:
            return
        new = conform(rows)
        old = self.read(latest=False)
        table = new if old.empty else pd.concat([old, new], ignore_index=True)
        with _replaced(self.path, ".results-") as tmp:
            table.to_parquet(tmp, index=False)

    def finished_cells(self) -> set[str]:
        """Keys of the cells whose latest attempt is ``ok`` or ``skipped``."""
        table = self.read()
        done = table[table["status"].isin(["ok", "skipped"])]
        return set(done["cell"].astype(str))

    def is_finished(self, cell: str) -> bool:
        """Whether ``cell`` has a finished latest attempt (re-runs skip it)."""
        return cell in self.finished_cells()

    # -- skipped images -------------------------------------------------------------------------
    def skipped_images(self) -> dict[str, dict[str, Any]]:
        """Source fingerprint -> ``{"source", "n_source", "skipped": [records]}``; ``{}`` if none."""
        path = self.folder / SKIPPED_FILE
        if not path.is_file():
            return {}
        return dict(json.loads(path.read_text(encoding="utf-8")))

    def add_skipped_images(self, found: Mapping[str, dict[str, Any]]) -> None:
        """Merge ``found`` into ``skipped_images.json`` (rewritten only when it changes)."""
        known = self.skipped_images()
        merged = {**known, **found}
        if merged == known:
            return
        with _replaced(self.folder / SKIPPED_FILE, ".skipped-") as tmp:
            Path(tmp).write_text(json.dumps(merged, indent=1, sort_keys=True), encoding="utf-8")

    # -- per-cell score arrays ------------------------------------------------------------------
    def scores_path(self, cell: str) -> Path:
        return self.scores_dir / f"{cell}.npz"

    def save_scores(self, cell: str, id_scores: np.ndarray, ood: Mapping[str, np.ndarray]) -> Path:
        """Keep the ID scores and each OOD group's scores of a cell (compressed ``.npz``)."""
        groups = list(ood)
        arrays: dict[str, np.ndarray] = {
            f"ood_{i}": np.asarray(ood[g], dtype=np.float64) for i, g in enumerate(groups)
        }
        arrays["id"] = np.asarray(id_scores, dtype=np.float64)
        arrays["groups"] = np.array(groups, dtype=str)
        path = self.scores_path(cell)
        with _replaced(path, ".scores-") as tmp:
            np.savez_compressed(tmp, **arrays)  # type: ignore[arg-type]
        return path

    def load_scores(self, cell: str) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """``(id_scores, {group: ood_scores})`` of a cell, or ``None`` when none were kept."""
        path = self.scores_path(cell)
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as data:
            groups: Sequence[str] = [str(g) for g in data["groups"]]
            return data["id"], {g: data[f"ood_{i}"] for i, g in enumerate(groups)}
