"""``ImageFolder``: torchvision's ``root/<class>/<image>`` layout as a :class:`Source`;
``OodFolder``: every image below a folder, unlabelled (an OOD set)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from oodbench.data._images import IMG_EXTENSIONS, FileSource, readonly_labels
from oodbench.errors import EmptyInputError, InvalidInputError, MissingDataError


class ImageFolder(FileSource):
    """Images laid out as ``root/<class>/<image>`` (any depth below the class folder).

    As in torchvision: class folders are sorted by name and a sample's label is the index of its
    class; files are sorted by relative path within a class, so the order is deterministic;
    files directly under ``root`` are ignored.

    Args:
        root: the folder holding one sub-folder per class.
        extensions: accepted file extensions, compared case-insensitively.
        class_names: the label order to use instead of the sorted folder names (for example
            the 1000 ImageNet wnids, so that labels match a model's outputs). Every class folder
            must appear in it; listed classes without a folder simply have no samples.
        name: the source's name in logs and results (default: the root folder's name).

    ``ids`` are the POSIX relative paths (``"cat/001.png"``). ``fingerprint()`` hashes the
    ordered (relative path, label, size, mtime_ns) records; ``fingerprint(mode="content")``
    hashes the file bytes instead (slow on big datasets, but exact).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        extensions: Sequence[str] = IMG_EXTENSIONS,
        class_names: Sequence[str] | None = None,
        name: str | None = None,
    ):
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise MissingDataError(
                f"ImageFolder root {os.fspath(self.root)!r} is not an existing folder; expected "
                "root/<class>/<image> with extensions " + ", ".join(extensions)
            )
        if isinstance(extensions, str):
            extensions = (extensions,)
        self.extensions = tuple(e.lower() for e in extensions)
        folders = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if class_names is None:
            self.class_names: list[str] = folders
        else:
            self.class_names = list(class_names)
            unknown = sorted(set(folders) - set(self.class_names))
            if unknown:
                raise InvalidInputError(
                    f"ImageFolder {os.fspath(self.root)!r}: folders {unknown[:10]} are not in "
                    "class_names; add them to class_names or move them out of the root"
                )
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.class_names)}
        relpaths: list[str] = []
        labels: list[int] = []
        for folder in folders:
            found = self._scan(self.root / folder)
            relpaths += found
            labels += [self.class_to_idx[folder]] * len(found)
        if not relpaths:
            raise EmptyInputError(self._empty_message(folders))
        self._relpaths = relpaths
        self._labels = readonly_labels(labels)
        self.name = name or self.root.name

    def _scan(self, class_dir: Path) -> list[str]:
        return scan_images(self.root, class_dir, self.extensions)

    def _empty_message(self, folders: list[str]) -> str:
        where = f"ImageFolder {os.fspath(self.root)!r}"
        if not folders:
            loose = [f for f in os.listdir(self.root) if f.lower().endswith(self.extensions)]
            hint = (
                f" ({len(loose)} images lie directly in the root: move them into a class folder,"
                " or list them in an ImageList file)"
                if loose
                else ""
            )
            return f"{where} has no class sub-folders{hint}; expected root/<class>/<image>"
        return (
            f"{where} holds no images with extensions {', '.join(self.extensions)} in its "
            f"{len(folders)} class folders"
        )

    def fingerprint(self, mode: str = "stat") -> str:
        """sha256 of the ordered (relative path, label, size + mtime_ns | bytes) records."""
        return self._files_fingerprint("ImageFolder", mode)


def scan_images(root: Path, start: Path, extensions: Sequence[str]) -> list[str]:
    """POSIX paths, relative to ``root``, of the images at any depth below ``start``: a folder's
    own files by name, then its sub-folders by name (``os.walk``; symbolic links followed)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(start, followlinks=True):
        dirnames.sort()
        for fname in sorted(filenames):
            if fname.lower().endswith(tuple(extensions)):
                out.append(Path(dirpath, fname).relative_to(root).as_posix())
    return out


class OodFolder(FileSource):
    """Every image below ``root`` as unlabelled OOD images (label -1): the usual shape of an OOD
    set, a flat folder of images, or a folder of class folders whose classes do not matter.

    Images at any depth are taken, in :func:`scan_images` order; ``ids`` are the relative paths.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        extensions: Sequence[str] = IMG_EXTENSIONS,
        name: str | None = None,
    ):
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise MissingDataError(
                f"OOD folder {os.fspath(self.root)!r} is not an existing folder; expected a "
                "folder of images (flat, or in sub-folders)"
            )
        self.extensions = tuple(e.lower() for e in ([extensions] if isinstance(extensions, str)
                                                     else extensions))
        self._relpaths = scan_images(self.root, self.root, self.extensions)
        if not self._relpaths:
            raise EmptyInputError(
                f"OOD folder {os.fspath(self.root)!r} holds no images with extensions "
                f"{', '.join(self.extensions)} (directly or in sub-folders)"
            )
        self._labels = readonly_labels([-1] * len(self._relpaths))
        self.name = name or self.root.name

    def fingerprint(self, mode: str = "stat") -> str:
        """sha256 of the ordered (relative path, label, size + mtime_ns | bytes) records."""
        return self._files_fingerprint("OodFolder", mode)


def open_folder(
    root: str | os.PathLike[str], *, name: str | None = None, flat_ood: bool = False
) -> FileSource:
    """A folder of images as a :class:`Source`, whatever its common layout.

    1. ImageNet validation images (``ILSVRC2012_val_<8 digits>.JPEG`` in ``root``,
       ``root/images`` or ``root/val``) with their labels next to them: :class:`ImageNetVal`
       (it says what is missing when no labels file, devkit or Kaggle CSV is found).
    2. Other images in ``root/images`` (or ``root``) listed with their labels in
       ``root/labels.txt`` (``<file> <label>`` lines): :class:`ImageList`.
    3. Class sub-folders ``root/<class>/<image>``: :class:`ImageFolder` (its folder names are
       mapped onto a model's classes by ``extract``, see :mod:`oodbench.data.labels`).
    4. With ``flat_ood``, images directly in ``root`` and no sub-folder: :class:`OodFolder`
       (unlabelled OOD images, as an experiment reads the folder of an OOD group, so the
       extraction is the one ``oodbench run`` reuses). Without it, such a folder raises the
       :class:`ImageFolder` error that says how to give the images labels.

    So a folder of flat images with a labels file is never read as a single class "images".
    """
    from oodbench.data.image_list import ImageList
    from oodbench.data.imagenet_val import IMAGE_SUBDIRS, LABEL_FILES, VAL_FILE, ImageNetVal

    folder = Path(root).expanduser()
    if not folder.is_dir():
        return ImageFolder(folder, name=name)  # raises the missing-folder error
    flat = {sub: sorted(e.name for e in os.scandir(folder / sub) if e.is_file())
            for sub in IMAGE_SUBDIRS if (folder / sub).is_dir()}
    if any(VAL_FILE.match(f) for files in flat.values() for f in files[:50]):
        return ImageNetVal(folder, name=name or "imagenet-val")
    label_file = next((folder / f for f in LABEL_FILES if (folder / f).is_file()), None)
    if label_file is not None:
        images = folder / "images" if (folder / "images").is_dir() else folder
        return ImageList(label_file, images, name=name or folder.name)
    if flat_ood and _flat_images(folder):
        return OodFolder(folder, name=name)
    return ImageFolder(folder, name=name)


def _flat_images(folder: Path) -> bool:
    """Whether ``folder`` holds images directly and no sub-folder."""
    entries = list(os.scandir(folder))
    return not any(e.is_dir() for e in entries) and any(
        e.is_file() and e.name.lower().endswith(IMG_EXTENSIONS) for e in entries)
