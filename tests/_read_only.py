"""Make a folder read-only for a test, also when the tests run as root.

``chmod a-w`` protects the folder from an ordinary user. Root ignores permissions, so for root the
entry points through which oodbench writes a results folder (``Path.mkdir``, ``Path.write_text``,
``open`` for writing, ``tempfile.mkstemp``, ``os.replace``) are patched to raise ``PermissionError``
for paths inside it, as a read-only mount would.
"""

from __future__ import annotations

import builtins
import os
import pathlib
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below ``folder``: (mtime_ns, bytes), to show that nothing was written."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


@contextmanager
def read_only(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    folder = folder.resolve()
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
    for path, mode in modes.items():
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    def inside(path: object) -> bool:
        try:
            return Path(os.fspath(path)).resolve().is_relative_to(folder)  # type: ignore[arg-type]
        except TypeError:
            return False

    def denied(path: object) -> PermissionError:
        return PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[arg-type]

    if os.geteuid() == 0:
        real_open, real_mkdir, real_write = builtins.open, pathlib.Path.mkdir, pathlib.Path.write_text
        real_mkstemp, real_replace = tempfile.mkstemp, os.replace

        def open_(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+") and inside(file):
                raise denied(file)
            return real_open(file, mode, *args, **kwargs)

        def mkdir(self, *args, **kwargs):
            if inside(self) and not self.is_dir():
                raise denied(self)
            return real_mkdir(self, *args, **kwargs)

        def write_text(self, *args, **kwargs):
            if inside(self):
                raise denied(self)
            return real_write(self, *args, **kwargs)

        def mkstemp(*args, dir=None, **kwargs):
            if dir is not None and inside(dir):
                raise denied(dir)
            return real_mkstemp(*args, dir=dir, **kwargs)

        def replace(src, dst, *args, **kwargs):
            if inside(dst):
                raise denied(dst)
            return real_replace(src, dst, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", open_)
        monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
        monkeypatch.setattr(pathlib.Path, "write_text", write_text)
        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
        monkeypatch.setattr(os, "replace", replace)
    try:
        yield
    finally:
        monkeypatch.undo()
        for path, mode in modes.items():
            path.chmod(mode)
