"""Which cells of a results folder belong to the experiment last run into it.

``oodbench run`` records the cell keys of its plan (``_experiments.json`` in the store folder)
before its first cell runs. Every view of the folder (the report, the terminal leaderboard,
``published compare``, ``paper rank``, ``ResultsTable.read``) shows the cells of that *current*
version; cells that only an earlier version of the experiment had (a removed detector, group,
benchmark or model, a changed hyper-parameter or preset: each makes new cell keys) stay on disk
and come back with ``--all`` (``include_earlier=True``), labelled with the version they belong
to. A folder without a record (written by ``oodbench.cood.run`` or an older oodbench) shows every
cell.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oodbench.results.store import CellStore

#: a leading "_": Parquet readers of the folder (pd.read_parquet, pyarrow.dataset) skip it
RECORD = "_experiments.json"
_FORMAT = 1


@dataclass(frozen=True)
class Version:
    """One version of the experiment: its name, when it was first run here, its cells."""

    digest: str
    experiment: str
    run: str
    cells: frozenset[str]

    def label(self) -> str:
        """``earlier version, run 2025-05-01 10:12 UTC``."""
        return f"earlier version, run {self.run[:16].replace('T', ' ')} UTC"

    def as_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "experiment": self.experiment, "run": self.run,
                "cells": sorted(self.cells)}


@dataclass(frozen=True)
class Record:
    """Every version recorded in a folder (oldest first) and the current one."""

    current: Version | None
    versions: tuple[Version, ...] = ()

    def label(self, cell: str) -> str:
        """The label of an earlier cell: the last version that had it."""
        for version in reversed(self.versions):
            if cell in version.cells and version is not self.current:
                return version.label()
        return "earlier version"


def digest(cells: Iterable[str]) -> str:
    """The identity of a set of cell keys."""
    return hashlib.sha256("\n".join(sorted(set(cells))).encode()).hexdigest()[:20]


def load(store: CellStore) -> Record:
    """The record of ``store``'s folder (no current version when none was written)."""
    path = store.folder / RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Record(None)
    versions = tuple(Version(v["digest"], v["experiment"], v["run"], frozenset(v["cells"]))
                     for v in data["versions"])
    current = next((v for v in versions if v.digest == data["current"]), None)
    return Record(current, versions)


def record(store: CellStore, cells: Sequence[str], experiment: str, now: str) -> bool:
    """Make ``cells`` the current version of the folder; ``False`` (nothing written) when they
    are already. The file is rewritten atomically, under the store's lock."""
    key = digest(cells)
    if (current := load(store).current) is not None and current.digest == key:
        return False
    store.folder.mkdir(parents=True, exist_ok=True)
    with store.lock(shared=False):
        known = load(store)
        versions = [v for v in known.versions if v.digest != key]
        versions.append(Version(key, experiment, now, frozenset(cells)))
        text = json.dumps({"format": _FORMAT, "current": key,
                           "versions": [v.as_json() for v in versions]}, indent=1)
        _write_text(store.folder / RECORD, text)
    return True


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
