"""Opt-in, checksummed, resumable downloads: the one downloader of oodbench, on pooch.

Nothing in oodbench calls this unless the user asks (``oodbench data download NAME DIR``,
:func:`download_dataset`, or the C-OOD paper table loaded from a URL,
:func:`oodbench.published.cood.download`); tests never reach the internet. :func:`download`
hands each file to `pooch <https://www.fatiando.org/pooch>`_ (``Pooch.fetch``), which

* keeps a file that is already in place with the right checksum (a cache hit), and downloads
  it when it is absent;
* downloads into a temporary file beside it, checks its md5/sha256 (pooch's ``known_hash``) and
  only then moves it into place, so a file with the final name is always complete and correct;
* retries a failed attempt (a dropped connection, a server error, a corrupt file) up to
  :data:`RETRIES` times, waiting 1 s, 2 s, ... in between, and logs each retry on stderr.

pooch's own HTTP downloader starts every attempt from zero; :class:`ResumableDownloader` (a
pooch downloader) writes to ``<file>.part`` instead and resumes it with an HTTP ``Range``
request, on pooch's next attempt or on the next call (a server that ignores ``Range`` restarts
it from zero). ``file://`` URLs (a mirror on a shared disk) are copied. Files without a known
checksum are refused unless ``allow_unverified=True``.

Archives are extracted with the ``"data"`` filter of :mod:`tarfile` (no absolute paths, no
``..``, no devices or links out of the folder) or :mod:`zipfile` with the same path checks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pooch
import requests

from oodbench.data.catalog import DatasetInfo, Download
from oodbench.errors import DataError, InvalidInputError

#: bytes read at a time when hashing a file
CHUNK = 1 << 20
#: bytes written to the ``.part`` file at a time (what a dropped connection can lose)
STREAM_CHUNK = 1 << 16
#: how many times pooch tries a failed download again (``file://`` copies are not retried)
RETRIES = 2
SCHEMES = ("http", "https", "file")

Progress = Callable[[int, int | None], None]


class ChecksumError(DataError):
    """A file's md5/sha256 differs from the expected value."""


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


class ResumableDownloader:
    """A pooch downloader (``downloader(url, output_file, pooch)``) that resumes.

    HTTP(S): the body goes to ``part``; when ``part`` already holds bytes (an interrupted
    attempt, or an earlier call when ``resume``) it asks for the rest with ``Range:
    bytes=<size>-`` and appends a ``206 Partial Content`` answer; any other answer restarts the
    file; ``416 Range Not Satisfiable`` means ``part`` is already whole. The finished ``part``
    is then moved to pooch's ``output_file``, which pooch checksums. ``file://``: a copy.
    ``progress(bytes_done, bytes_total_or_None)`` is called after every chunk written.
    """

    def __init__(
        self,
        part: Path,
        *,
        resume: bool = True,
        timeout: float = 60.0,
        progress: Progress | None = None,
    ) -> None:
        self.part, self.resume, self.timeout, self.progress = part, resume, timeout, progress

    def __call__(self, url: str, output_file: str, pooch_instance: Any = None) -> None:
        parts = urlsplit(url)
        if parts.scheme == "file":
            shutil.copyfile(unquote(parts.path), output_file)
            return
        self._fill_part(url)
        os.replace(self.part, output_file)

    def _fill_part(self, url: str) -> None:
        offset = self.part.stat().st_size if (self.resume and self.part.exists()) else 0
        self.resume = True  # pooch's next attempt continues what this one wrote
        # identity: a Range counts bytes of the file itself, not of a compressed transfer
        headers = {"User-Agent": "oodbench", "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        with requests.get(url, headers=headers, stream=True, timeout=self.timeout) as response:
            if response.status_code == 416 and offset:  # the .part already holds the whole file
                return
            response.raise_for_status()
            appending = offset > 0 and response.status_code == 206
            length = response.headers.get("Content-Length")
            total = (int(length) + (offset if appending else 0)) if length else None
            done = offset if appending else 0
            with open(self.part, "ab" if appending else "wb") as fh:
                for chunk in response.iter_content(STREAM_CHUNK):
                    fh.write(chunk)
                    done += len(chunk)
                    if self.progress is not None:
                        self.progress(done, total)


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha256: str | None = None,
    allow_unverified: bool = False,
    resume: bool = True,
    replace_stale: bool = False,
    timeout: float = 60.0,
    progress: Progress | None = None,
) -> Path:
    """Download ``url`` to ``dest`` (through pooch: verified, retried, resumable); returns ``dest``.

    An existing ``dest`` with the right checksum is kept as it is; one with another checksum
    raises :class:`ChecksumError` (a file the user put there), or is downloaded again with
    ``replace_stale=True`` (a cache). ``resume=False`` ignores a ``.part`` left by an earlier
    call. ``progress(bytes_done, bytes_total_or_None)`` is called after every chunk. pooch
    checks the sha256 when one is given, else the md5; when both are, the md5 is checked after.
    """
    if not (md5 or sha256) and not allow_unverified:
        raise InvalidInputError(
            f"no checksum is known for {url}: pass md5=/sha256=, or allow_unverified=True to "
            "download it anyway (then check the result with `oodbench data check`)"
        )
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise InvalidInputError(
            f"cannot download {url!r}: oodbench downloads {', '.join(SCHEMES)} URLs; fetch it "
            "another way and pass the local path"
        )
    dest = Path(dest).expanduser()
    checks = [(algorithm, value) for algorithm, value in (("sha256", sha256), ("md5", md5)) if value]
    known_hash = f"{checks[0][0]}:{checks[0][1]}" if checks else None
    fetcher = pooch.create(
        path=dest.parent,
        base_url="",
        registry={dest.name: known_hash},
        urls={dest.name: url},
        retry_if_failed=0 if scheme == "file" else RETRIES,
        allow_updates=replace_stale,
    )
    part = dest.with_name(dest.name + ".part")
    existed = dest.exists()
    downloader = ResumableDownloader(part, resume=resume, timeout=timeout, progress=progress)
    try:
        fetcher.fetch(dest.name, downloader=downloader)
    except requests.HTTPError as err:
        status = getattr(err.response, "status_code", "?")
        reason = getattr(err.response, "reason", "")
        raise DataError(
            f"download of {url} failed: HTTP {status} {reason}; check the URL (a catalogue "
            "entry may be out of date) or try again later"
        ) from err
    except requests.RequestException as err:
        if isinstance(err, ValueError):  # requests' InvalidURL, MissingSchema, ...
            raise InvalidInputError(f"cannot download {url!r}: {err}") from err
        raise DataError(
            f"download of {url} failed ({err}); the partial file {part} is kept and the next "
            "call resumes it"
        ) from err
    except ValueError as err:  # pooch: checksum mismatch, or a stale file it may not replace
        if existed and not replace_stale:
            verify(dest, md5=md5, sha256=sha256)  # names the file's actual checksum
        algorithm, expected = checks[0]
        raise ChecksumError(
            f"{dest} from {url}: {algorithm} is not the expected {expected} ({err}). The "
            "download is corrupt or the file is a different version: download it again; if the "
            "checksum still differs, the published file has changed"
        ) from err
    except OSError as err:  # a missing file:// source, a full or read-only disk
        raise DataError(f"download of {url} to {dest} failed: {err}") from err
    if len(checks) > 1:
        try:
            verify(dest, **{algorithm: value for algorithm, value in checks[1:]})
        except ChecksumError:
            if not existed:
                dest.unlink(missing_ok=True)
            raise
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
