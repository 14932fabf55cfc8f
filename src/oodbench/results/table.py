"""The tidy results table: one row per model x detector x benchmark x OOD group x metric.

Stored in ``<folder>/results/``, one Parquet part per cell (:mod:`oodbench.results.store`), plus
per-cell score arrays in ``<folder>/scores/``. A *cell* is one (model, detector configuration,
benchmark) triple; every row carries the key of the cell that produced it, the time the cell
finished and its status:

    ``ok``       the cell ran; one row per (group, metric)
    ``failed``   the cell raised; one row with the error message (``metric`` is empty)
    ``skipped``  the detector does not apply to the model; one row with the reason

:meth:`ResultsTable.append` writes each cell's rows into its own part (atomically) and
:meth:`ResultsTable.is_finished` looks one cell up: neither reads the rest of the table.
Re-running a cell adds a new attempt; :func:`dedupe` keeps only the latest attempt of each
cell, and a cell counts as finished when its latest attempt is ``ok`` or ``skipped``.

:meth:`ResultsTable.read` shows the cells of the experiment last run into the folder
(:mod:`oodbench.results.experiments`); ``include_earlier=True`` adds the cells of its earlier
versions, labelled. A folder written by an older oodbench (one ``results.parquet``) is read as
it is and moved into the store by the first write (an append, or recording an experiment),
which prints a line saying so.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import sys
import tempfile
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from oodbench.atomic_files import new_file_mode
from oodbench.errors import DataError, InvalidInputError, NotWritableError
from oodbench.params import Params, params, to_text
from oodbench.results import experiments
from oodbench.results.columns import COLUMNS, NESTED, SCHEMA, STATUSES, conform, conforms, empty
from oodbench.results.store import CellStore, from_arrow, to_arrow

__all__ = ["COLUMNS", "FILE_NAME", "NESTED", "SCHEMA", "STATUSES", "ResultsTable", "ResultsView",
           "check_writable", "conform", "dedupe", "empty", "from_wide", "now", "status_row",
           "to_wide", "with_text", "writing"]

#: the store folder inside an output folder
STORE_DIR = "results"
#: the single-file table of oodbench before the store: read, and moved into the store on write
FILE_NAME = "results.parquet"
#: what that file is renamed to once its rows are in the store
MIGRATED_NAME = "results.parquet.migrated"
SCORES_DIR = "scores"
#: unreadable images the extractions behind the results skipped (per source)
SKIPPED_FILE = "skipped_images.json"

#: wide-result columns that identify a row rather than measure something
_ID_COLUMNS = {"detector", "hyperparams", "group", "kind", "level", "n_id", "n_ood", "seed"}
#: wide columns ``<metric>_ci_low`` / ``<metric>_ci_high``: the interval of that metric's row
_INTERVAL_SUFFIXES = ("_ci_low", "_ci_high")
_VERSIONED = ("oodbench", "torch", "torchvision", "timm", "numpy", "scikit-learn", "open_clip_torch")


@functools.lru_cache(maxsize=1)
def package_versions() -> Params:
    """The versions of the packages that shape the numbers (read once per process)."""
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return Params(versions)


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
               "cells can be copied there with the results/ folder)")


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


def from_wide(
    wide: pd.DataFrame,
    *,
    model: str,
    benchmark: str,
    cell: str,
    seconds: float,
    time: str,
    experiment: str = "",
    versions: Mapping[str, str] | None = None,
    tuning: Mapping[str, Any] | None = None,
    fit_transform: str = "",
) -> pd.DataFrame:
    """Turn a benchmark's wide result (one row per detector x group) into long ``ok`` rows.

    ``hyperparams`` (and ``tuning``, unless given here: the record of a tuning run) of the wide
    rows may be mappings or the JSON text benchmarks write; they become ``Params``.
    ``fit_transform``: the transform the detector's fit data was read with (every row).

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
            "hyperparams": wide["hyperparams"] if "hyperparams" in wide else None,
            "group": wide["group"].astype(str),
            "kind": wide["kind"].astype(str) if "kind" in wide else "",
            "level": wide["level"] if "level" in wide else pd.NA,
            "n_id": wide["n_id"] if "n_id" in wide else pd.NA,
            "n_ood": wide["n_ood"] if "n_ood" in wide else pd.NA,
            "seed": wide["seed"] if "seed" in wide else pd.Series(pd.NA, index=wide.index, dtype="Int64"),
            **{c: wide[c].astype(str) if c in wide else "" for c in ("preset", "fit_data")},
            "tuning": wide["tuning"] if tuning is None and "tuning" in wide else None,
        }
    )
    # the long rows metric by metric, each block the wide rows in order (what ``DataFrame.melt``
    # gives, without its per-column object copies: ~0.1 s a cell at 11 levels x 6 metrics)
    n_rows = len(wide)
    long = base.iloc[np.tile(np.arange(n_rows), len(metric_columns))].reset_index(drop=True)
    long["metric"] = np.repeat(np.asarray(metric_columns, dtype=object), n_rows)
    long["value"] = np.concatenate(
        [wide[m].astype("float64").to_numpy() for m in metric_columns]
    ) if metric_columns else np.empty(0)
    for bound, suffix in zip(("ci_low", "ci_high"), _INTERVAL_SUFFIXES):  # metric by metric
        long[bound] = np.concatenate([
            wide[f"{m}{suffix}"].to_numpy(dtype=float) if f"{m}{suffix}" in wide
            else np.full(len(wide), np.nan) for m in metric_columns
        ])
    long = long.assign(
        model=model, benchmark=benchmark, cell=cell, seconds=float(seconds), time=time,
        status="ok", error="", experiment=experiment, fit_transform=fit_transform,
        versions=[params(versions) if versions is not None else package_versions()] * len(long),
    )
    if tuning is not None:
        long["tuning"] = [params(tuning)] * len(long)
    return conform(long)


def with_text(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the nested columns (``hyperparams``, ``tuning``, ``versions``) as their
    canonical JSON text, the form older results files held: for writing a results DataFrame to a
    Parquet or CSV file by hand (the store keeps them typed)."""
    return rows.assign(**{c: [to_text(params(v)) for v in rows[c]] for c in NESTED
                          if c in rows.columns})


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
    hyperparams: Mapping[str, Any] | str,
    benchmark: str,
    cell: str,
    status: str,
    error: str,
    seconds: float,
    time: str,
    experiment: str = "",
    versions: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One row recording a ``failed`` or ``skipped`` cell and why."""
    row = pd.DataFrame([{
        "model": model, "detector": detector, "benchmark": benchmark, "group": "", "kind": "",
        "metric": "", "value": np.nan, "status": status, "error": error, "cell": cell,
        "seconds": float(seconds), "time": time, "experiment": experiment,
    }])
    row["hyperparams"] = [params(hyperparams)]
    row["versions"] = [params(versions) if versions is not None else package_versions()]
    return conform(row)


def dedupe(table: pd.DataFrame) -> pd.DataFrame:
    """Keep only the latest attempt of every cell (and drop exact duplicate rows)."""
    if table.empty:
        return table.reset_index(drop=True)
    latest = table.groupby("cell")["time"].transform("max")
    kept = table[table["time"] == latest]
    keys = ["cell", "group", "metric", "time"]
    return kept.drop_duplicates(subset=keys, keep="last").reset_index(drop=True)


class ResultsWarning(UserWarning):
    """Something about a results folder the reader should know (it could not be updated)."""


@dataclass(frozen=True)
class ResultsView:
    """What a view of a results folder shows: ``rows`` (the current experiment's cells, or
    every cell with ``include_earlier``), how many cells of earlier versions of the experiment
    are in the folder (``earlier``) and whether they are among the rows (``included``)."""

    rows: pd.DataFrame
    earlier: int = 0
    included: bool = False

    @property
    def note(self) -> str:
        """One line about the earlier cells ("" when there are none)."""
        if not self.earlier:
            return ""
        n = self.earlier
        cells = f"{n} cell{'s' if n != 1 else ''} from an earlier version of this experiment"
        if self.included:
            return f"{cells} {'are' if n != 1 else 'is'} included, labelled [earlier version, ...]"
        return f"{cells} {'are' if n != 1 else 'is'} kept but not shown: --all to include them"


class ResultsTable:
    """The results of one output folder: the store ``results/`` and ``scores/<cell>.npz``.

    >>> table = ResultsTable("results/")          # doctest: +SKIP
    >>> table.append(rows); table.read()          # doctest: +SKIP
    >>> table.is_finished(cell_key)               # doctest: +SKIP
    """

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self.path = self.folder / STORE_DIR
        self.legacy_path = self.folder / FILE_NAME
        self.scores_dir = self.folder / SCORES_DIR
        self.store = CellStore(self.path)

    def __repr__(self) -> str:
        return f"ResultsTable({str(self.folder)!r})"

    def exists(self) -> bool:
        """Whether the folder holds results (the store, or an older ``results.parquet``)."""
        return self.legacy_path.is_file() or self.store.has_data()

    # -- rows ---------------------------------------------------------------------------------
    def read(self, *, latest: bool = True, include_earlier: bool = False,
             cells: Collection[str] | None = None) -> pd.DataFrame:
        """The rows of the current experiment's cells (only each cell's latest attempt when
        ``latest``; with ``include_earlier``, the cells of its earlier versions too, their
        ``benchmark`` labelled; with ``cells``, exactly those cells); empty when there are none
        yet. A folder without a recorded experiment shows every cell."""
        return self.view(latest=latest, include_earlier=include_earlier, cells=cells).rows

    def view(self, *, latest: bool = True, include_earlier: bool = False,
             cells: Collection[str] | None = None) -> ResultsView:
        """:meth:`read` with the count of the earlier cells, for the one-line note."""
        rows = self._all_rows()
        rows = dedupe(rows) if latest else rows.drop_duplicates(
            ["cell", "group", "metric", "time"], keep="last").reset_index(drop=True)
        if cells is not None:
            return ResultsView(rows[rows["cell"].isin(list(cells))].reset_index(drop=True))
        record = experiments.load(self.store)
        if record.current is None or rows.empty:
            return ResultsView(rows)
        current = rows["cell"].isin(record.current.cells).to_numpy()
        earlier = int(rows.loc[~current, "cell"].nunique())
        if not include_earlier:
            return ResultsView(rows[current].reset_index(drop=True), earlier)
        labels = {c: record.label(c) for c in rows.loc[~current, "cell"].unique()}
        rows = rows.copy()
        rows.loc[~current, "benchmark"] = [f"{b} [{labels[c]}]" for b, c in
                                           zip(rows.loc[~current, "benchmark"],
                                               rows.loc[~current, "cell"])]
        return ResultsView(rows, earlier, included=True)

    def _all_rows(self) -> pd.DataFrame:
        """Every stored row (and those of an older ``results.parquet`` not moved yet)."""
        frames = []
        if self.legacy_path.is_file():
            frames.append(self._legacy_rows())
        try:
            stored = self.store.read()
        except pa.ArrowException as err:
            raise DataError(
                f"cannot read the results in {self.path}: {err}. Move the damaged file it names "
                "out of the folder (its cell will run again)"
            ) from err
        frames.append(from_arrow(stored))
        rows = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        return rows.reset_index(drop=True)

    def _legacy_rows(self) -> pd.DataFrame:
        try:
            table = pd.read_parquet(self.legacy_path)
        except Exception as err:  # pyarrow raises several types for a damaged file
            raise DataError(
                f"cannot read the results table {self.legacy_path}: {err}. Move it away to start "
                "a fresh table (finished cells will then run again)"
            ) from err
        return conform(table)

    def migrate(self) -> int:
        """Move the rows of an older ``results.parquet`` into the store (renamed to
        ``results.parquet.migrated`` afterwards) and print a line saying so; the number of
        cells moved (0: nothing to move)."""
        if not self.legacy_path.is_file():
            return 0
        self.path.mkdir(parents=True, exist_ok=True)
        with self.store.lock(shared=False):
            if not self.legacy_path.is_file():  # another process moved it meanwhile
                return 0
            rows = self._legacy_rows()
            if len(rows):
                self.store.write_batch(to_arrow(rows), label="migrated-")
            os.replace(self.legacy_path, self.folder / MIGRATED_NAME)
        n = int(rows["cell"].nunique())
        print(f"results: moved the {n} cells of {self.legacy_path} into {self.path} (one file "
              f"per cell); the old file is kept as {MIGRATED_NAME}", file=sys.stderr)
        return n

    def append(self, rows: pd.DataFrame) -> None:
        """Add ``rows`` (conformed to the schema): each cell's rows go to its own part,
        atomically; the rest of the table is not read."""
        if rows.empty:
            return
        new = to_arrow(rows if conforms(rows) else conform(rows))
        with writing(self.folder, "the results"):
            self.migrate()
            cells = pc.unique(new.column("cell")).to_pylist()
            for cell in cells:
                part = new if len(cells) == 1 else new.filter(pc.equal(new.column("cell"), cell))
                self.store.write(str(cell), part)
            self.store.compact()

    def finished_cells(self) -> set[str]:
        """Keys of the cells whose latest attempt is ``ok`` or ``skipped`` (current or not): an
        older ``results.parquet``'s attempts, unless the store holds one as late or later."""
        latest: dict[str, tuple[str, str]] = {}
        if self.legacy_path.is_file():
            old = dedupe(self._legacy_rows()).drop_duplicates("cell")
            latest = {str(c): (str(t), str(s)) for c, t, s in zip(old["cell"], old["time"],
                                                                 old["status"])}
        for cell, stored in self.store.latest().items():
            if cell not in latest or latest[cell][0] <= stored[0]:
                latest[cell] = stored
        return {c for c, (_, status) in latest.items() if status in ("ok", "skipped")}

    def is_finished(self, cell: str) -> bool:
        """Whether ``cell`` has a finished latest attempt (re-runs skip it)."""
        if self.legacy_path.is_file():
            return cell in self.finished_cells()
        found = self.store.statuses(cell)
        return found is not None and found[1] in ("ok", "skipped")

    # -- the current experiment ---------------------------------------------------------------
    def start_experiment(self, cells: Sequence[str], name: str = "",
                         files: Mapping[str, str] | None = None) -> None:
        """Open the folder for an experiment about to run, in one call: keep ``files`` (name ->
        text: the experiment's configuration) next to the results, then make ``cells`` its
        current experiment (:meth:`set_experiment`: what every view of the folder shows).

        ``files`` are given when cells are left to run: the folder must then be writable
        (:func:`check_writable` first: ``NotWritableError``), and a file whose content is
        already that is not rewritten. A folder that cannot be written keeps its record, with a
        ``ResultsWarning`` (pointing at the code that ran the experiment)."""
        if files:
            check_writable(self.folder)
            with writing(self.folder, "the experiment's configuration"):
                self.folder.mkdir(parents=True, exist_ok=True)
                for file_name, text in files.items():
                    path = self.folder / file_name
                    if not path.is_file() or path.read_text(encoding="utf-8") != text:
                        path.write_text(text, encoding="utf-8")
        try:
            self.set_experiment(cells, name)
        except NotWritableError as err:
            warnings.warn(f"{err}; its views (oodbench report, ...) still show the experiment last "
                          "recorded there", ResultsWarning, stacklevel=3)

    def set_experiment(self, cells: Sequence[str], name: str = "") -> bool:
        """Make ``cells`` the current experiment of the folder (what every view shows); ``False``
        when they already are (nothing recorded). An older ``results.parquet`` is moved into the
        store first (:meth:`migrate`; a folder that has one has no record yet)."""
        with writing(self.folder, "the results"):
            self.migrate()
            return experiments.record(self.store, list(cells), name, now())

    def earlier_cells(self) -> int:
        """How many cells in the folder are not the current experiment's (0 when none is
        recorded); reads only the cell keys."""
        current = self.current_cells()
        if current is None:
            return 0
        cells = set(self.store.latest())
        if self.legacy_path.is_file():
            cells |= set(self._legacy_rows()["cell"].astype(str))
        return len(cells - current)

    def current_cells(self) -> frozenset[str] | None:
        """The cell keys of the experiment last run into the folder (``None``: not recorded)."""
        current = experiments.load(self.store).current
        return None if current is None else current.cells

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
