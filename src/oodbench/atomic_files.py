"""Crash-safe file writes: write a temporary file next to the target, fsync, ``os.replace``.

``os.replace`` is atomic on POSIX and Windows, so a reader (or a resumed run) sees either the old
file or the complete new one, never a half-written file, whenever the writer is killed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def new_file_mode() -> int:
    """The permissions ``open()`` gives a new file in this process: ``0o666`` less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path next to ``path``; renamed onto ``path`` when the block succeeds.

    The file gets the permissions of a normal new file (:func:`new_file_mode`), whatever the
    writer used (safetensors and ``tempfile`` create theirs readable by the owner only).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _atomic_open(path: Path, mode: str) -> Iterator[IO[Any]]:
    with atomic_path(path) as tmp, open(tmp, mode) as f:
        yield f


def save_npy(path: Path, array: np.ndarray) -> str:
    """Write ``array`` to ``path`` atomically (no pickles); returns the file's sha256."""
    with _atomic_open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
    return file_sha256(path)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    with _atomic_open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)
