"""The results store: one Parquet part per cell in ``<output>/results/``, read as one dataset.

Layout of the store folder::

    cell-<key>.parquet           the rows of one cell (each of its attempts)
    batch-<token>.parquet        the parts of many cells merged into one file (compaction)
    claim-<token>-<key>.parquet  a part being merged; only a killed compaction leaves one (it is
                                 read like a part and merged by the next compaction)
    _experiments.json            the cell keys of each version of the experiment run here, and
                                 which is the current one (:mod:`oodbench.results.experiments`)
    .lock                        taken by a compaction (exclusive) and a reader (shared)

Why this layout and not a database: each append writes one small file to a temporary name in
the folder and renames it onto ``cell-<key>.parquet`` (``os.replace``: atomic on POSIX and
Windows, and on the network file systems a Ray cluster shares), so a SIGKILL leaves the cell or
nothing; two processes appending different cells never touch the same file, and two writing
the same cell end with one part. Its cost does not grow with the table: the part and, for
:meth:`CellStore.statuses`, a listing of the folder, which compaction keeps short. SQLite would
give the same guarantees on a local disk, but its locks are unreliable on NFS and its rows
would leave Parquet; DuckDB lets one process write a database file at a time. The folder stays
a Parquet dataset any tool reads (``pd.read_parquet(".../results")``).

Compaction: once :data:`COMPACT_AT` parts wait, the next append that finds the lock free
renames them to claims (so a writer that replaces a part meanwhile keeps its new file), writes
them into one batch file (atomically) and deletes the claims. A reader holds the lock shared, so
it never sees a half-done compaction; it reads every part, claim and batch and keeps each row
once (:func:`oodbench.results.table.dedupe`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from oodbench.params import Params, from_text, to_text
from oodbench.results.columns import ARROW_SCHEMA, COLUMNS, NESTED

try:  # POSIX; elsewhere the store works without compaction
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PART, BATCH, CLAIM, TEMP = "cell-", "batch-", "claim-", ".tmp-"
SUFFIX = ".parquet"
LOCK = ".lock"
#: parts that wait before an append merges them into one batch file
COMPACT_AT = 256
#: a temporary file older than this (seconds) was left by a killed writer: compaction deletes it
STALE_TEMP = 3600.0
#: columns that say whether a cell finished
STATUS_COLUMNS = ("cell", "time", "status")

_SAFE = re.compile(r"[A-Za-z0-9_.=-]{1,120}")
_WRITE_OPTIONS = {"compression": "snappy", "write_statistics": False}


def stem(cell: str) -> str:
    """The file-name part of a cell key: the key itself, or ``~`` and its digest when the key
    holds characters a file name should not."""
    if _SAFE.fullmatch(cell) and not cell.startswith("."):
        return cell
    return "~" + hashlib.sha256(cell.encode()).hexdigest()[:40]


# -- Arrow <-> pandas ---------------------------------------------------------------------------
def to_arrow(rows: pd.DataFrame) -> pa.Table:
    """Conformed rows (``oodbench.results.columns.conform``) as an Arrow table of
    :data:`ARROW_SCHEMA`; each distinct nested value is encoded once."""
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for (name, column), field in zip(rows.items(), ARROW_SCHEMA):
        if name in NESTED:
            codes, uniques = _factorize(column)
            if name == "versions":
                encoded = pa.array([list(u.items()) for u in uniques], type=field.type)
            else:
                storage = pa.array([to_text(u) for u in uniques], type=pa.string())
                encoded = pa.ExtensionArray.from_storage(field.type, storage)
            arrays.append(encoded.take(pa.array(codes, type=pa.int64())))
            continue
        values = column.array
        array = (values.__arrow_array__() if hasattr(values, "__arrow_array__")  # no copy
                 else pa.array(column.to_numpy(), from_pandas=True))
        arrays.append(array if array.type == field.type else array.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)


def _factorize(values: pd.Series) -> tuple[list[int], list[Params]]:
    """Codes and distinct values of a column of ``Params`` (most hold one value, often one
    object: compared by identity first)."""
    codes: list[int] = []
    uniques: list[Params] = []
    seen: dict[Params, int] = {}
    last: object = None
    code = -1
    for value in values:
        if value is not last:
            found = seen.get(value)
            if found is None:
                found = seen[value] = len(uniques)
                uniques.append(value)
            code, last = found, value
        codes.append(code)
    return codes, uniques


def objects(values: Sequence[object]) -> np.ndarray:
    """A 1-d object array of ``values`` (``np.array`` would unpack mappings into a 2-d one)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _decoded(values: list[Params], indices: pa.Array) -> np.ndarray:
    """``values[i]`` for each index (a null index: an empty ``Params``)."""
    return objects([*values, Params()])[indices.fill_null(len(values)).to_numpy(zero_copy_only=False)]


def _json_column(column: pa.ChunkedArray) -> np.ndarray:
    storage = pa.chunked_array([c.storage for c in column.chunks], type=pa.string())
    encoded = storage.combine_chunks().dictionary_encode()
    return _decoded([from_text(t) for t in encoded.dictionary.to_pylist()], encoded.indices)


def _map_column(table: pa.Table, name: str) -> np.ndarray:
    """A ``map<string, string>`` column, decoded once per attempt (the rows of a cell written at
    one time share it)."""
    if table.num_rows == 0:
        return objects([])
    cells, times = (table.column(c).fill_null("").combine_chunks().dictionary_encode()
                    for c in ("cell", "time"))
    attempt = (cells.indices.to_numpy(zero_copy_only=False).astype(np.int64) * (len(times.dictionary) + 1)
               + times.indices.to_numpy(zero_copy_only=False))
    _, first, inverse = np.unique(attempt, return_index=True, return_inverse=True)
    decoded: dict[tuple[tuple[str, str], ...], Params] = {}
    values = []
    for pairs in table.column(name).take(first).to_pylist():
        key = tuple(pairs or ())
        if key not in decoded:
            decoded[key] = Params(dict(key))
        values.append(decoded[key])
    return objects(values)[inverse]


def from_arrow(table: pa.Table) -> pd.DataFrame:
    """The Arrow table of :func:`to_arrow` (or a dataset read) as a DataFrame of the schema."""
    nested = {"hyperparams": _json_column(table.column("hyperparams")),
              "tuning": _json_column(table.column("tuning")),
              "versions": _map_column(table, "versions")}
    mapping = {pa.large_string(): pd.StringDtype(), pa.int64(): pd.Int64Dtype()}
    frame = table.drop_columns(list(NESTED)).to_pandas(types_mapper=mapping.get)
    for name, values in nested.items():
        frame[name] = pd.Series(values, index=frame.index, dtype=object)
    return frame[list(COLUMNS)]


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    """What tells one version of a file from another."""
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


# -- the folder ---------------------------------------------------------------------------------
class CellStore:
    """The Parquet parts of one results folder (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self._batch_names: list[str] = []
        self._batch_index: dict[str, tuple[str, str]] = {}
        #: the parts this object wrote, by name: (inode, size, mtime) and rows, so that a
        #: compaction does not read back what it has in memory
        self._written: dict[str, tuple[tuple[int, int, int], pa.Table]] = {}

    def __repr__(self) -> str:
        return f"CellStore({str(self.folder)!r})"

    # -- listing and locking --------------------------------------------------------------------
    def names(self) -> list[str]:
        """The file names of the folder (empty when it does not exist)."""
        try:
            with os.scandir(self.folder) as entries:
                return [e.name for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    @staticmethod
    def data_files(names: Sequence[str]) -> list[str]:
        """The parts, claims and batches among ``names``."""
        return sorted(n for n in names if n.endswith(SUFFIX) and n.startswith((PART, CLAIM, BATCH)))

    def has_data(self) -> bool:
        return bool(self.data_files(self.names()))

    @contextlib.contextmanager
    def lock(self, *, shared: bool, blocking: bool = True) -> Iterator[bool]:
        """``flock`` on ``.lock``; yields whether it is held. A reader of a folder without a
        lock file (or on a system without ``flock``) proceeds unlocked: no compaction has run
        there, and a file renamed under it is read again (:meth:`read`)."""
        if fcntl is None:
            yield True
            return
        path = self.folder / LOCK
        handle: IO[bytes] | None = None
        try:
            handle = open(path, "rb") if shared else open(path, "ab")
        except OSError:
            if not shared:
                raise
        if handle is None:
            yield True
            return
        with handle:
            mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
            try:
                fcntl.flock(handle.fileno(), mode)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # -- writing ----------------------------------------------------------------------------------
    def _write_atomic(self, path: Path, table: pa.Table) -> os.stat_result:
        """Write ``table`` to a temporary file in the folder and rename it onto ``path``; the
        file's ``stat``."""
        tmp = self.folder / f"{TEMP}{uuid.uuid4().hex}{SUFFIX}"
        try:
            pq.write_table(table, tmp, **_WRITE_OPTIONS)  # type: ignore[arg-type]
            stat = tmp.stat()
            os.replace(tmp, path)
            return stat
        finally:
            if tmp.exists():
                tmp.unlink()

    def write(self, cell: str, rows: pa.Table) -> None:
        """Add the rows of one cell (one attempt) to its part, keeping its earlier attempts."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{PART}{stem(cell)}{SUFFIX}"
        try:
            earlier = pq.read_table(path, schema=ARROW_SCHEMA)
        except FileNotFoundError:
            earlier = None
        table = rows if earlier is None else pa.concat_tables([earlier, rows])
        stat = self._write_atomic(path, table)
        self._written[path.name] = (_identity(stat), table)
        if len(self._written) > 2 * COMPACT_AT:  # another process compacts: forget the oldest
            del self._written[next(iter(self._written))]

    def write_batch(self, rows: pa.Table, label: str = "") -> Path:
        """Write many cells' rows as one batch file (a migrated table)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{BATCH}{label}{uuid.uuid4().hex[:16]}{SUFFIX}"
        self._write_atomic(path, rows)
        return path

    def compact(self, at: int | None = None) -> int:
        """Merge the parts into one batch file when ``at`` (default :data:`COMPACT_AT`) or more
        wait (and the lock is free); returns how many files were merged."""
        at = COMPACT_AT if at is None else at
        names = self.names()
        parts = [n for n in names if n.startswith(PART) and n.endswith(SUFFIX)]
        claims = [n for n in names if n.startswith(CLAIM) and n.endswith(SUFFIX)]
        if len(parts) < at and not claims:
            return 0
        with self.lock(shared=False, blocking=False) as held:
            if not held:
                return 0
            names = self.names()  # again, under the lock
            token = uuid.uuid4().hex[:16]
            claimed = [n for n in names if n.startswith(CLAIM) and n.endswith(SUFFIX)]
            for name in (n for n in names if n.startswith(PART) and n.endswith(SUFFIX)):
                target = f"{CLAIM}{token}-{name[len(PART):]}"
                try:
                    os.rename(self.folder / name, self.folder / target)
                except FileNotFoundError:
                    continue
                claimed.append(target)
            if not claimed:
                return 0
            merged = self._claimed_rows(claimed)
            self._write_atomic(self.folder / f"{BATCH}{token}{SUFFIX}", merged)
            for name in claimed:
                (self.folder / name).unlink(missing_ok=True)
            self._remove_stale_temps(names)
            return len(claimed)

    def _claimed_rows(self, claimed: Sequence[str]) -> pa.Table:
        """The rows of the claimed files: from memory for the parts this object wrote (and no
        one replaced since), from disk for the others."""
        tables, unread = [], []
        for name in claimed:
            part = PART + name.split("-", 2)[2] if name.count("-") >= 2 else ""
            kept = self._written.pop(part, None)
            try:
                same = kept is not None and _identity((self.folder / name).stat()) == kept[0]
            except FileNotFoundError:
                same = False
            if same and kept is not None:
                tables.append(kept[1])
            else:
                unread.append(str(self.folder / name))
        if unread:
            tables.append(ds.dataset(unread, format="parquet", schema=ARROW_SCHEMA).to_table())
        self._written.clear()  # whatever was not claimed was replaced or merged elsewhere
        return pa.concat_tables(tables)

    def _remove_stale_temps(self, names: Sequence[str]) -> None:
        now = time.time()
        for name in (n for n in names if n.startswith(TEMP)):
            path = self.folder / name
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > STALE_TEMP:
                    path.unlink()

    # -- reading ------------------------------------------------------------------------------------
    def read(self, columns: Sequence[str] | None = None, *, attempts: int = 5) -> pa.Table:
        """Every row of every part, claim and batch (as Arrow), read under the shared lock; a
        file renamed or removed between listing and reading makes it list and read again."""
        for attempt in range(attempts):
            with self.lock(shared=True):
                files = [str(self.folder / n) for n in self.data_files(self.names())]
                try:
                    return ds.dataset(files, format="parquet", schema=ARROW_SCHEMA).to_table(
                        columns=list(columns) if columns is not None else None)
                except FileNotFoundError:
                    if attempt == attempts - 1:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _latest(self, table: pa.Table) -> dict[str, tuple[str, str]]:
        """Cell -> (time, status) of its latest attempt in ``table`` (cell, time, status)."""
        if table.num_rows == 0:
            return {}
        frame = table.select(list(STATUS_COLUMNS)).to_pandas()
        frame = frame.sort_values("time", kind="stable").drop_duplicates("cell", keep="last")
        return {str(c): (str(t), str(s)) for c, t, s in zip(frame["cell"], frame["time"],
                                                             frame["status"])}

    def _batches(self, names: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Cell -> latest (time, status) over the batch files among ``names``: each batch is
        read once per process (batches never change) and merged into one index, rebuilt only
        when a batch disappears."""
        batches = {n for n in names if n.startswith(BATCH) and n.endswith(SUFFIX)}
        if not set(self._batch_names) <= batches:  # one was removed by hand: start again
            self._batch_names, self._batch_index = [], {}
        for name in sorted(batches - set(self._batch_names)):
            table = pq.read_table(self.folder / name, columns=list(STATUS_COLUMNS))
            for cell, found in self._latest(table).items():
                known = self._batch_index.get(cell)
                if known is None or found > known:
                    self._batch_index[cell] = found
            self._batch_names.append(name)
        return self._batch_index

    def statuses(self, cell: str) -> tuple[str, str] | None:
        """(time, status) of the latest attempt of ``cell``; ``None`` when it has none. Reads the
        cell's part (or claim) and looks the cell up in the index of the batch files."""
        key = f"{stem(cell)}{SUFFIX}"
        for _ in range(5):
            names = self.names()
            own = [n for n in names
                   if n == PART + key or (n.startswith(CLAIM) and n.endswith("-" + key))]
            try:
                found = [self._latest(pq.read_table(self.folder / n, columns=list(STATUS_COLUMNS)))
                         .get(cell) for n in own]
                found.append(self._batches(names).get(cell))
            except FileNotFoundError:  # compacted meanwhile: look again
                continue
            known = [f for f in found if f is not None]
            return max(known) if known else None
        return None

    def latest(self) -> dict[str, tuple[str, str]]:
        """Cell -> (time, status) of its latest attempt, for every cell of the folder."""
        return self._latest(self.read(STATUS_COLUMNS))
