"""Opt-in, checksummed, resumable downloads of public dataset archives.

Nothing in oodbench calls this unless the user asks (``oodbench data download NAME DIR`` or
:func:`download_dataset`); tests never touch the network. A download:

* writes to ``<file>.part`` and resumes it with an HTTP ``Range`` request when interrupted
  (a server that ignores ``Range`` restarts it from zero);
* verifies the md5/sha256 of the finished file and only then renames it into place, so a file
  with the final name is always complete and correct;
* refuses files without a known checksum unless ``allow_unverified=True``.

Archives are extracted with the ``"data"`` filter of :mod:`tarfile` (no absolute paths, no
``..``, no devices or links out of the folder) or :mod:`zipfile` with the same path checks.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oodbench.data.catalog import DatasetInfo, Download
from oodbench.errors import DataError, InvalidInputError

CHUNK = 1 << 20


class ChecksumError(DataError):
    """A file's md5/sha256 differs from the expected value."""


def _urlopen(request: urllib.request.Request, timeout: float) -> Any:
    """The network call (a module-level seam so the resume logic can be tested offline)."""
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - user-requested URL


def file_digest(path: str | os.PathLike[str], algorithm: str) -> str:
    """Hex digest (``"md5"`` or ``"sha256"``) of a file, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | os.PathLike[str], *, md5: str | None = None, sha256: str | None = None) -> None:
    """Raise :class:`ChecksumError` unless ``path`` has the given md5 and/or sha256."""
    for algorithm, expected in (("md5", md5), ("sha256", sha256)):
        if expected:
            actual = file_digest(path, algorithm)
            if actual.lower() != expected.lower():
                raise ChecksumError(
                    f"{path}: {algorithm} is {actual}, expected {expected}. The file is incomplete "
                    "or a different version: delete it and download it again"
                )


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha256: str | None = None,
    allow_unverified: bool = False,
    resume: bool = True,
    timeout: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download ``url`` to ``dest`` (resumable, verified); returns ``dest``.

    ``progress(bytes_done, bytes_total_or_None)`` is called after every chunk. An existing
    ``dest`` with the right checksum is kept as it is.
    """
    if not (md5 or sha256) and not allow_unverified:
        raise InvalidInputError(
            f"no checksum is known for {url}: pass md5=/sha256=, or allow_unverified=True to "
            "download it anyway (then check the result with `oodbench data check`)"
        )
    dest = Path(dest).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        if md5 or sha256:
            verify(dest, md5=md5, sha256=sha256)
        return dest
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if (resume and part.exists()) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "oodbench"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = _urlopen(request, timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # the .part already holds the whole file
            response = None
        else:
            raise DataError(f"download of {url} failed: HTTP {err.code} {err.reason}") from err
    except (urllib.error.URLError, OSError) as err:
        raise DataError(
            f"download of {url} failed ({err}); the partial file {part} is kept and the next "
            "call resumes it"
        ) from err
    if response is not None:
        with response:
            status = getattr(response, "status", 200)
            appending = offset > 0 and status == 206
            length = response.headers.get("Content-Length")
            total = (int(length) + (offset if appending else 0)) if length else None
            done = offset if appending else 0
            with open(part, "ab" if appending else "wb") as fh:
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    fh.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
    try:
        verify(part, md5=md5, sha256=sha256)
    except ChecksumError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    return dest


def _safe_members(zf: zipfile.ZipFile, dest: Path) -> None:
    root = dest.resolve()
    for name in zf.namelist():
        target = (dest / name).resolve()
        if target != root and root not in target.parents:
            raise DataError(f"refusing to extract {name!r}: it points outside {dest}")


def extract(archive: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Extract a tar (any compression) or zip archive into ``dest`` safely; returns ``dest``."""
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            _safe_members(zf, dest)
            zf.extractall(dest)
        return dest
    if not tarfile.is_tarfile(archive):
        raise DataError(f"{archive} is neither a tar nor a zip archive")
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without the extraction filters
            for member in tar.getmembers():
                target = (dest / member.name).resolve()
                if dest.resolve() not in target.parents and target != dest.resolve():
                    raise DataError(f"refusing to extract {member.name!r}: outside {dest}")
                if member.issym() or member.islnk() or member.isdev():
                    raise DataError(f"refusing to extract link or device {member.name!r}")
            tar.extractall(dest)
    return dest


def download_dataset(
    info: DatasetInfo,
    directory: str | os.PathLike[str],
    *,
    unpack: bool = True,
    allow_unverified: bool = False,
    progress: Callable[[Download, int, int | None], None] | None = None,
) -> list[Path]:
    """Download (and by default extract) every public archive of a catalogue entry.

    Raises ``DataError`` with the catalogue's "where to get it" text when the entry has no
    public URL (ImageNet, OpenOOD's Google-Drive archives, ...).
    """
    if not info.public_downloads:
        raise DataError(
            f"{info.name} has no public download URL oodbench can fetch. {info.where_to_get()}"
        )
    unverified = [d.filename for d in info.public_downloads if not d.has_checksum]
    if unverified and not allow_unverified:
        raise InvalidInputError(
            f"no checksum is published for {', '.join(unverified)} ({info.name}): download "
            "anyway with allow_unverified=True (command line: --allow-unverified), then check "
            f"the result with `oodbench data check {info.name} PATH`"
        )
    directory = Path(directory).expanduser()
    out = []
    for item in info.public_downloads:
        report = None if progress is None else (lambda done, total, _d=item: progress(_d, done, total))
        path = download(
            item.url,
            directory / item.filename,
            md5=item.md5,
            sha256=item.sha256,
            allow_unverified=allow_unverified,
            progress=report,
        )
        if unpack:
            extract(path, directory)
        out.append(path)
    return out

