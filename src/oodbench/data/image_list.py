"""``ImageList``: OpenOOD's image-list files (``relative/path label`` per line) as a :class:`Source`.

OpenOOD v1.5 describes every benchmark split by such a file (``benchmark_imglist/imagenet/
test_inaturalist.txt``: ``inaturalist/images/xxx.jpg -1``); paths are relative to a data root
and label ``-1`` marks an OOD image. The label is the last whitespace-separated field, so paths
may contain spaces.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from oodbench.data._images import FileSource, readonly_labels
from oodbench.errors import EmptyInputError, InvalidInputError, MissingDataError


def parse_image_list(file: Path) -> tuple[list[str], list[int]]:
    """The (relative paths, labels) of an image-list file; blank lines are ignored.

    Raises ``InvalidInputError`` naming the file and line for a line that is not
    ``<path> <integer label >= -1>``.
    """
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise InvalidInputError(
            f"image list {os.fspath(file)!r} is not UTF-8 text ({err}); expected "
            "'<relative/path> <label>' lines"
        ) from err
    paths: list[str] = []
    labels: list[int] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.strip().rsplit(maxsplit=1)
        try:
            label = int(fields[1]) if len(fields) == 2 else None
        except ValueError:
            label = None
        if label is None or label < -1:
            raise InvalidInputError(
                f"{os.fspath(file)}, line {lineno}: {line.strip()!r} is not "
                "'<relative/path> <label>' with an integer label >= -1 (-1 = OOD)"
            )
        paths.append(fields[0])
        labels.append(label)
    return paths, labels


class ImageList(FileSource):
    """The images listed in ``file``, read from ``root / <relative path>``.

    Args:
        file: the image-list file (``relative/path label`` per line, label ``-1`` = OOD).
        root: the folder the paths are relative to.
        name: the source's name (default: the list file's stem, ``test_inaturalist``).
        class_names: names of the label indices, when known.

    Listed files are not checked up front (lists may name a million images): a missing one
    raises ``CorruptImageError`` from ``load``, which the extraction engine skips and reports.
    ``ids`` are the relative paths as written in the file. ``fingerprint()`` hashes the ordered
    (relative path, label, size, mtime_ns) records; ``fingerprint(mode="content")`` hashes
    the file bytes instead.
    """

    def __init__(
        self,
        file: str | os.PathLike[str],
        root: str | os.PathLike[str],
        *,
        name: str | None = None,
        class_names: Sequence[str] | None = None,
    ):
        self.file = Path(file).expanduser()
        self.root = Path(root).expanduser()
        if not self.file.is_file():
            raise MissingDataError(
                f"image list {os.fspath(self.file)!r} does not exist; expected a text file with "
                "one '<relative/path> <label>' line per image"
            )
        if not self.root.is_dir():
            raise MissingDataError(
                f"image root {os.fspath(self.root)!r} of list {os.fspath(self.file)!r} is not an "
                "existing folder; pass the folder the listed paths are relative to"
            )
        paths, labels = parse_image_list(self.file)
        if not paths:
            raise EmptyInputError(f"image list {os.fspath(self.file)!r} lists no images")
        self._relpaths = paths
        self._labels = readonly_labels(labels)
        self.name = name or self.file.stem
        self.class_names = list(class_names) if class_names is not None else None

    def fingerprint(self, mode: str = "stat") -> str:
        """sha256 of the ordered (relative path, label, size + mtime_ns | bytes) records."""
        return self._files_fingerprint("ImageList", mode)
