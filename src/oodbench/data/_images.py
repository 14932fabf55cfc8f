"""Shared parts of the file-based sources: strict image decoding, file fingerprints and
:class:`FileSource`, the base of ``ImageFolder``, ``ImageList`` and ``ImageNetVal``.

Decoding is strict on purpose. A truncated JPEG that PIL could half-decode (grey bottom rows)
would silently change a model's scores, so ``open_rgb`` always decodes with PIL's
``ImageFile.LOAD_TRUNCATED_IMAGES`` switched off, even when some other library switched it on
for the whole process, and turns every failure into :class:`CorruptImageError`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile

from oodbench.data.download import file_digest
from oodbench.data.source import Source
from oodbench.errors import CorruptImageError, InvalidInputError

#: the file extensions torchvision's ImageFolder accepts (compared case-insensitively)
IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg",
    ".jpeg",
    ".png",
    ".ppm",
    ".bmp",
    ".pgm",
    ".tif",
    ".tiff",
    ".webp",
)

#: ``fingerprint(mode=...)`` of file sources: ``"stat"`` hashes (path, size, mtime), cheap;
#: ``"content"`` hashes every byte of every file, slow but immune to touched or copied files
FINGERPRINT_MODES = ("stat", "content")

_TRUNCATION_LOCK = threading.Lock()


@contextmanager
def _strict_truncation() -> Iterator[None]:
    """Decode with ``LOAD_TRUNCATED_IMAGES`` off; restore the process-wide setting afterwards.

    The lock is taken only when the flag is on (the default is off), so threads that decode in
    parallel are serialised only in a process where someone turned lenient decoding on.
    """
    if not ImageFile.LOAD_TRUNCATED_IMAGES:
        yield
        return
    with _TRUNCATION_LOCK:
        previous = ImageFile.LOAD_TRUNCATED_IMAGES
        ImageFile.LOAD_TRUNCATED_IMAGES = False
        try:
            yield
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES = previous


def open_rgb(path: str | os.PathLike[str]) -> Image.Image:
    """Open, fully decode and convert to RGB; any failure -> ``CorruptImageError`` naming ``path``.

    Failures include a missing or unreadable file, bytes that are not an image, a truncated or
    corrupt stream and PIL's decompression-bomb guard.
    """
    try:
        with _strict_truncation(), Image.open(path) as img:
            img.load()
            return img.convert("RGB")
    except Exception as err:  # PIL raises OSError, SyntaxError, ValueError, EOFError, ...
        raise CorruptImageError(
            f"cannot decode image {os.fspath(path)!r}: {type(err).__name__}: {err}. "
            "Replace or delete the file (the extraction engine skips and reports it)."
        ) from err


def check_fingerprint_mode(mode: str) -> None:
    if mode not in FINGERPRINT_MODES:
        raise InvalidInputError(
            f"fingerprint mode {mode!r} is not one of {FINGERPRINT_MODES}: 'stat' hashes "
            "(relative path, size, mtime_ns), 'content' hashes the file bytes"
        )


def files_fingerprint(
    kind: str, root: Path, relpaths: Sequence[str], labels: np.ndarray, mode: str = "stat"
) -> str:
    """sha256 over the ordered ``(relative path, label, file state)`` records of a file source.

    The file state is ``size:mtime_ns`` (``mode="stat"``) or the sha256 of the bytes
    (``mode="content"``); a missing or unreadable file hashes as ``missing``. The root folder
    itself is not hashed, so a dataset moved elsewhere keeps its fingerprint in content mode
    (stat mode too, when the copy preserves modification times).
    """
    check_fingerprint_mode(mode)
    h = hashlib.sha256(f"oodbench/{kind}/{mode}/v1\n".encode())
    for rel, label in zip(relpaths, labels.tolist()):
        path = root / rel
        try:
            if mode == "stat":
                st = os.stat(path)
                state = f"{st.st_size}:{st.st_mtime_ns}"
            else:
                state = file_digest(path, "sha256")
        except OSError:
            state = "missing"
        h.update(f"{rel}\0{label}\0{state}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def readonly_labels(labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """An int64 copy of ``labels`` that cannot be modified in place."""
    out = np.array(labels, dtype=np.int64)
    out.setflags(write=False)
    return out


class FileSource(Source):
    """A :class:`Source` of image files ``root / relpath``, one int64 label per file.

    Subclasses find their files in ``__init__`` and set ``root``, ``_relpaths`` (POSIX paths
    relative to ``root``, in sample order) and ``_labels`` (``readonly_labels(...)``); they
    define ``fingerprint`` through :meth:`_files_fingerprint` with their own ``kind`` tag, which
    is hashed into the digest (part of the activation cache keys).
    """

    root: Path
    _relpaths: list[str]
    _labels: np.ndarray

    def __len__(self) -> int:
        return len(self._relpaths)

    def load(self, index: int) -> Image.Image:
        return open_rgb(self.path(index))

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    @property
    def ids(self) -> list[str]:
        return list(self._relpaths)

    def path(self, index: int) -> Path:
        """The file of sample ``index``."""
        return self.root / self._relpaths[index]

    def _files_fingerprint(self, kind: str, mode: str) -> str:
        return files_fingerprint(kind, self.root, self._relpaths, self._labels, mode)
