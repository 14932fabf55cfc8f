"""One entry of the activation cache: ``cache_dir()/activations/<key>/``.

Layout::

    <key>/manifest.json              what was extracted, the shards done so far, checksums
    <key>/shards/000003/logits.npy   one folder per shard while the run is in progress
    <key>/logits.npy, features.npy, feature_map.npy, source_indices.npy, labels.npy, ids.npy
                                     the final contiguous arrays (one memmap each), once complete
    <key>/.lock                      held (flock) by the process writing the entry

Shard ``k`` covers source positions ``[k * shard_size, (k + 1) * shard_size)``; its rows are the
images of that range that could be read. Every file is written to a temporary name and renamed
(see ``_atomic``); the manifest, rewritten atomically after each complete shard, is the only
record of which shards are complete, so a run killed at any point resumes from the last
complete shard. When every shard is done the shards are concatenated into the final arrays,
the manifest is marked complete with their checksums, and the shard folders are deleted.

Reading a complete entry verifies each array file against its sha256 the first time a process
opens it (and again whenever the file's size or modification time changes), so a damaged or
edited file is caught on use, not only by ``oodbench cache verify``; set
``OODBENCH_CACHE_VERIFY=0`` to skip the check (e.g. huge feature maps on slow storage).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oodbench.atomic_files import atomic_path, file_sha256, read_json, save_npy, write_json
from oodbench.config import cache_dir
from oodbench.errors import CacheError

try:  # POSIX advisory locks; without them (Windows) concurrent writers are not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: per-row arrays computed by the forward pass and stored per shard
SHARD_ARRAYS = ("logits", "features", "feature_map", "source_indices")
#: per-row arrays taken from the source when the entry is finalised
SOURCE_ARRAYS = ("labels", "ids")
#: files whose checksum this process has verified: path -> (inode, size, mtime_ns) then
_VERIFIED: dict[str, tuple[int, int, int]] = {}


def verify_on_read() -> bool:
    """Whether complete entries are checked against their checksums when first read."""
    return os.environ.get("OODBENCH_CACHE_VERIFY", "1").strip().lower() not in ("0", "false", "no", "off")


def activations_root() -> Path:
    """``cache_dir()/activations``: where every cache entry lives."""
    return cache_dir() / "activations"


class ActivationStore:
    """Reads and writes one cache entry (a folder named by the cache key)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def for_key(cls, key: str) -> ActivationStore:
        return cls(activations_root() / key)

    @property
    def key(self) -> str:
        return self.path.name

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def shard_dir(self, index: int) -> Path:
        return self.path / "shards" / f"{index:06d}"

    # manifest -----------------------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or ``None`` when the entry does not exist yet."""
        if not self.manifest_path.exists():
            return None
        try:
            manifest = read_json(self.manifest_path)
        except (OSError, ValueError) as err:
            raise CacheError(
                f"cache entry {self.path} has an unreadable manifest ({err}); remove it with "
                f"`oodbench cache rm {self.key}` and extract again"
            ) from err
        return manifest if isinstance(manifest, dict) else None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        with self.disk_errors():
            self.path.mkdir(parents=True, exist_ok=True)
            write_json(self.manifest_path, manifest)

    @contextlib.contextmanager
    def disk_errors(self) -> Iterator[None]:
        """Turn a failed write (no space, no permission) into a ``CacheError`` naming the fix."""
        try:
            yield
        except OSError as err:
            raise CacheError(
                f"cannot write the activation cache entry {self.path}: {err}. Free disk space or "
                "point OODBENCH_CACHE at a writable folder (or extract with cache=False); "
                "completed shards are kept and a rerun resumes"
            ) from err

    def complete_manifest(self) -> dict[str, Any] | None:
        """The manifest if the entry is complete and its final files are present, else None."""
        manifest = self.read_manifest()
        if not manifest or not manifest.get("complete"):
            return None
        if any(not (self.path / a["file"]).exists() for a in manifest["arrays"].values()):
            return None
        return manifest

    @contextlib.contextmanager
    def lock(self) -> Iterator[bool]:
        """Hold the entry's write lock; yields whether another process held it first."""
        with self.disk_errors():
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / ".lock").touch()
        with open(self.path / ".lock", "a") as handle:
            waited = False
            if fcntl is not None:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    waited = True
                    fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield waited
            finally:
                if fcntl is not None:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    # shards -------------------------------------------------------------------------------
    def valid_shards(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The manifest's shard records whose files exist and match their checksums."""
        valid = {}
        for name, record in manifest.get("shards", {}).items():
            folder = self.shard_dir(int(name))
            if all(
                (folder / f).exists() and file_sha256(folder / f) == digest
                for f, digest in record["files"].items()
            ):
                valid[name] = record
        return valid

    def write_shard(
        self,
        manifest: dict[str, Any],
        index: int,
        arrays: dict[str, np.ndarray],
        skipped: Sequence[dict[str, Any]],
    ) -> None:
        """Write one complete shard, then record it in the manifest (atomically)."""
        record = self.write_shard_files(index, arrays, skipped)
        self.record_shard(manifest, index, record)

    def write_shard_files(
        self, index: int, arrays: dict[str, np.ndarray], skipped: Sequence[dict[str, Any]]
    ) -> dict[str, Any]:
        """Write shard ``index``'s array files (atomically) and return its manifest record
        (rows, file checksums, skipped images); the manifest itself is left alone, so a worker
        that does not own the entry can write shards for the process that does."""
        folder = self.shard_dir(index)
        with self.disk_errors():
            folder.mkdir(parents=True, exist_ok=True)
            files = {f"{n}.npy": save_npy(folder / f"{n}.npy", a) for n, a in arrays.items()}
        return {"rows": int(len(arrays["source_indices"])), "files": files, "skipped": list(skipped)}

    def record_shard(self, manifest: dict[str, Any], index: int, record: dict[str, Any]) -> None:
        """Add a written shard's record to ``manifest`` and rewrite it (atomically)."""
        manifest["shards"][str(index)] = record
        self.write_manifest(manifest)

    def _shard_array(self, index: int, name: str) -> np.ndarray:
        return np.load(self.shard_dir(index) / f"{name}.npy", mmap_mode="r")

    # final arrays -------------------------------------------------------------------------
    def finalize(
        self,
        manifest: dict[str, Any],
        per_row: Callable[[np.ndarray], dict[str, np.ndarray]],
    ) -> None:
        """Concatenate the shards into one contiguous file per array and mark the entry complete.

        ``per_row(source_indices)`` gives the per-row arrays that come from the source (labels,
        ids). Each array is written with ``numpy.lib.format.open_memmap`` shard by shard, so
        memory stays at one shard; shard folders are deleted only once the manifest says complete.
        """
        order = sorted(manifest["shards"], key=int)
        filled = [int(k) for k in order if manifest["shards"][k]["rows"]]
        if not filled:
            raise CacheError(f"cache entry {self.path} has no rows to finalise")
        stored = manifest["shards"][str(filled[0])]["files"]
        rows = sum(manifest["shards"][k]["rows"] for k in order)
        final: dict[str, Any] = {}
        with self.disk_errors():
            for name in (n for n in SHARD_ARRAYS if f"{n}.npy" in stored):
                parts = [self._shard_array(k, name) for k in filled]
                final[name] = self._write_concatenated(name, parts, rows)
            source_indices = np.load(self.path / final["source_indices"]["file"], mmap_mode="r")
            for name, array in per_row(np.asarray(source_indices)).items():
                path = self.path / f"{name}.npy"
                final[name] = _array_record(path, save_npy(path, array), array)
        manifest.update(complete=True, rows=rows, arrays=final)
        self.write_manifest(manifest)
        for record in final.values():  # hashed as they were written: no need to read them again
            _remember_verified(self.path / record["file"])
        shutil.rmtree(self.path / "shards", ignore_errors=True)

    def _write_concatenated(self, name: str, parts: list[np.ndarray], rows: int) -> dict[str, Any]:
        path = self.path / f"{name}.npy"
        shape = (rows, *parts[0].shape[1:])
        with atomic_path(path) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=parts[0].dtype, shape=shape)
            offset = 0
            for part in parts:
                out[offset : offset + len(part)] = part
                offset += len(part)
            out.flush()
            del out
        return _array_record(path, file_sha256(path), np.load(path, mmap_mode="r"))

    def load_arrays(
        self, manifest: dict[str, Any], names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """The final arrays ``names`` (default: all) of a complete entry, memory-mapped read-only.

        ``CacheError`` names the entry, the file and the fix when a file is missing, has another
        shape, or does not match its checksum (checked once per process, see the module doc).
        """
        arrays = {}
        for name, record in manifest["arrays"].items():
            if names is not None and name not in names:
                continue
            path = self.path / record["file"]
            try:
                array = np.load(path, mmap_mode="r")
                shape = list(array.shape)
                problem = None if shape == record["shape"] else f"has shape {shape}, not {record['shape']}"
                if problem is None and not self._verified(path, record["sha256"]):
                    problem = "does not match its checksum (it changed or was damaged after it was written)"
            except (OSError, ValueError) as err:
                problem = f"cannot be read ({err})"
            if problem:
                raise CacheError(
                    f"cache entry {self.key} ({manifest.get('model')} on "
                    f"{manifest.get('source', {}).get('name')}): {record['file']} {problem}. "
                    "Extract again with repair=True (--repair on the command line), or remove the "
                    f"entry with `oodbench cache rm {self.key[:12]}`"
                )
            arrays[name] = array
        return arrays

    @staticmethod
    def _verified(path: Path, sha256: str) -> bool:
        """Whether ``path`` matches ``sha256``; hashed once per process and file version."""
        if not verify_on_read() or _VERIFIED.get(str(path)) == _version(path):
            return True
        if file_sha256(path) != sha256:
            return False
        _remember_verified(path)
        return True

    # management ---------------------------------------------------------------------------
    def remove(self) -> None:
        """Delete the entry's folder."""
        shutil.rmtree(self.path)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def verify(self) -> list[str]:
        """Problems found by re-hashing every file the manifest lists (empty list = intact)."""
        manifest = self.read_manifest()
        if manifest is None:
            return [f"{MANIFEST} is missing"]
        expected: dict[Path, str] = {}
        if manifest.get("complete"):
            for record in manifest["arrays"].values():
                expected[self.path / record["file"]] = record["sha256"]
        else:
            for name, record in manifest.get("shards", {}).items():
                for f, digest in record["files"].items():
                    expected[self.shard_dir(int(name)) / f] = digest
        problems = []
        for path, digest in expected.items():
            rel = path.relative_to(self.path)
            if not path.exists():
                problems.append(f"{rel} is missing")
            elif file_sha256(path) != digest:
                problems.append(f"{rel} does not match its checksum")
        return problems


def _version(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _remember_verified(path: Path) -> None:
    """Note that this version of ``path`` matches its recorded checksum."""
    _VERIFIED[str(path)] = _version(path)


def _array_record(path: Path, sha256: str, array: np.ndarray) -> dict[str, Any]:
    return {
        "file": path.name,
        "sha256": sha256,
        "shape": list(array.shape),
        "dtype": array.dtype.str,
    }
