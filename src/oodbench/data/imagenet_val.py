"""ImageNet-1k (ILSVRC-2012) validation images as a :class:`~oodbench.data.source.Source`.

Labels are indices into the 1000 ILSVRC-2012 wnids in **sorted order** (``n01440764`` = 0,
tench), the order timm, torchvision and every ImageNet checkpoint use. The images may be laid
out in any of the common ways; the label source is found in this order:

1. ``labels=`` given: a text file of ``<file> <class index 0-999>`` or ``<file> <wnid>`` lines
   (file names may carry folders; they are matched by base name).
2. Class folders ``<root>/<wnid>/*.JPEG`` (what PyTorch's ``valprep.sh`` produces).
3. A flat folder of ``ILSVRC2012_val_<8 digits>.JPEG`` files (in ``root``, ``root/images`` or
   ``root/val``) with, next to it (in that folder, ``root`` or ``root``'s parent):
   ``labels.txt`` / ``val.txt`` (``<file> <index>``, the Caffe sorted-synset convention),
   Kaggle's ``LOC_val_solution.csv``, or the ILSVRC-2012 devkit (``ILSVRC2012_devkit_t12/``
   folder or ``ILSVRC2012_devkit_t12.tar.gz``), whose ground truth uses the devkit's own
   ``ILSVRC2012_ID`` numbering and is mapped to the sorted order through ``data/meta.mat``.

A ``synset_words.txt`` next to the labels (index -> wnid, names) is checked against the sorted
wnid list, so a labels file written in another class order fails loudly instead of silently
mis-labelling every image.

    val = ImageNetVal("/data/ILSVRC2012/val")
    val.labels[:3], val.class_names[val.labels[0]], val.descriptions[0]
"""

from __future__ import annotations

import csv
import io
import os
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image

from oodbench.data._images import (
    IMG_EXTENSIONS,
    FileSource,
    check_fingerprint_mode,
    readonly_labels,
)
from oodbench.data.imagenet import imagenet1k_wnids, is_wnid, lemmas
from oodbench.errors import DataError, InvalidInputError, MissingDataError

NUM_CLASSES = 1000
VAL_FILE = re.compile(r"^ILSVRC2012_val_(\d{8})\.JPEG$", re.IGNORECASE)
DEVKIT = "ILSVRC2012_devkit_t12"
#: where flat images may sit, relative to the given root
IMAGE_SUBDIRS = ("", "images", "val", "ILSVRC2012_img_val")
#: label files of the sorted-synset convention, looked up next to the images
LABEL_FILES = ("labels.txt", "val.txt", "ILSVRC2012_val_labels.txt")
KAGGLE_SOLUTION = "LOC_val_solution.csv"
GETTING_LABELS = (
    "put a labels file (`<file> <class index 0-999>` per line, sorted-synset order) named "
    "labels.txt next to the images, or pass labels=PATH; or place the devkit "
    f"({DEVKIT}.tar.gz or its extracted folder) next to the images; or sort the images into "
    "one folder per wnid with PyTorch's valprep.sh "
    "(github.com/pytorch/examples/blob/main/imagenet/extract_ILSVRC.sh)"
)


@dataclass(frozen=True)
class ValLayout:
    """What :func:`discover` found: images (relative to ``image_root``), labels and how."""

    image_root: Path
    relpaths: list[str]
    labels: np.ndarray
    label_source: str
    unlabelled: int = 0  # image files present that the label source does not mention
    missing: tuple[str, ...] = ()  # files a labels file lists that are absent (strict=False)


def _tagged(err: DataError, kind: str) -> DataError:
    """Attach the ``oodbench.data.check`` problem kind (``err.kind``) to a layout error."""
    setattr(err, "kind", kind)  # noqa: B010 - DataError has no such field; checks read it
    return err


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def _wnid_index() -> dict[str, int]:
    return {w: i for i, w in enumerate(imagenet1k_wnids())}


# -- label sources ---------------------------------------------------------------------------
def read_label_file(path: Path) -> dict[str, int]:
    """``<file> <index | wnid>`` lines -> {base name: sorted-synset index}."""
    index = _wnid_index()
    out: dict[str, int] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = raw.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise DataError(
                f"{path}:{number}: expected `<file> <class index>` or `<file> <wnid>`, got {raw!r}"
            )
        name, value = os.path.basename(parts[0]), parts[1]
        if is_wnid(value):
            if value not in index:
                raise DataError(f"{path}:{number}: {value} is not one of the 1000 ImageNet-1k wnids")
            out[name] = index[value]
        else:
            try:
                label = int(value)
            except ValueError:
                raise DataError(
                    f"{path}:{number}: the label {value!r} is neither a class index nor a wnid"
                ) from None
            if not 0 <= label < NUM_CLASSES:
                raise DataError(
                    f"{path}:{number}: class index {label} is outside 0-999. oodbench expects "
                    "0-based sorted-synset indices (the devkit's 1-based ILSVRC2012_IDs are a "
                    f"different numbering: place {DEVKIT} next to the images instead)"
                )
            out[name] = label
    if not out:
        raise DataError(f"{path} holds no labels")
    return out


def read_kaggle_solution(path: Path) -> dict[str, int]:
    """Kaggle's ``LOC_val_solution.csv`` (``ImageId,PredictionString``; first token = wnid)."""
    index = _wnid_index()
    out: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            image, prediction = row.get("ImageId"), (row.get("PredictionString") or "").split()
            if not image or not prediction or prediction[0] not in index:
                raise DataError(f"{path}: unreadable row {row!r} (expected ImageId,PredictionString)")
            out[f"{image}.JPEG"] = index[prediction[0]]
    return out


def _devkit_members(devkit: Path) -> tuple[IO[bytes], IO[bytes]]:
    """(meta.mat, ground truth) of a devkit folder or ``.tar.gz``, as binary streams."""
    meta_rel, truth_rel = "data/meta.mat", "data/ILSVRC2012_validation_ground_truth.txt"
    if devkit.is_dir():
        base = devkit / DEVKIT if (devkit / DEVKIT).is_dir() else devkit
        meta, truth = base / meta_rel, base / truth_rel
        for path in (meta, truth):
            if not path.is_file():
                raise MissingDataError(f"the devkit folder {devkit} has no {path.relative_to(base)}")
        return io.BytesIO(meta.read_bytes()), io.BytesIO(truth.read_bytes())
    try:
        with tarfile.open(devkit) as tar:
            found = {}
            for member in tar.getmembers():
                for rel in (meta_rel, truth_rel):
                    if member.name.endswith(rel):
                        stream = tar.extractfile(member)
                        if stream is not None:
                            found[rel] = io.BytesIO(stream.read())
    except (tarfile.TarError, OSError) as err:
        raise DataError(f"cannot read the devkit archive {devkit}: {err}") from err
    missing = [rel for rel in (meta_rel, truth_rel) if rel not in found]
    if missing:
        raise DataError(f"the devkit archive {devkit} lacks {', '.join(missing)}")
    return found[meta_rel], found[truth_rel]


def read_devkit(devkit: Path) -> dict[str, int]:
    """The devkit ground truth as {file name: sorted-synset index}.

    ``ILSVRC2012_validation_ground_truth.txt`` gives, for val image ``k`` (line ``k``), its
    1-based ``ILSVRC2012_ID``; ``meta.mat`` maps the IDs of the 1000 leaf synsets
    (``num_children == 0``) to wnids, and the wnid's position among the sorted wnids is the label.
    """
    from scipy.io import loadmat

    meta_stream, truth_stream = _devkit_members(devkit)
    try:
        synsets = loadmat(meta_stream, squeeze_me=True)["synsets"]
        ids = np.asarray(synsets["ILSVRC2012_ID"], dtype=np.int64)
        wnids = [str(w) for w in synsets["WNID"]]
        leaves = np.asarray(synsets["num_children"], dtype=np.int64) == 0
    except (KeyError, ValueError, TypeError) as err:
        raise DataError(f"{devkit}: meta.mat is not the ILSVRC-2012 devkit's ({err})") from err
    index = _wnid_index()
    id_to_label = {int(i): index[w] for i, w, leaf in zip(ids, wnids, leaves) if leaf and w in index}
    if len(id_to_label) != NUM_CLASSES:
        raise DataError(
            f"{devkit}: meta.mat maps {len(id_to_label)} leaf synsets to ImageNet-1k wnids, "
            f"expected {NUM_CLASSES}"
        )
    out = {}
    lines = truth_stream.read().decode("ascii").split()
    for k, value in enumerate(lines, start=1):
        try:
            out[f"ILSVRC2012_val_{k:08d}.JPEG"] = id_to_label[int(value)]
        except (KeyError, ValueError):
            raise DataError(
                f"{devkit}: ground-truth line {k} holds {value!r}, not an ILSVRC2012_ID of meta.mat"
            ) from None
    return out


def check_synset_words(path: Path) -> None:
    """``synset_words.txt`` (line i = ``<wnid> <names>``) must list the wnids in sorted order."""
    listed = [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    expected = imagenet1k_wnids()
    if listed != expected:
        first = next((i for i, (a, b) in enumerate(zip(listed, expected)) if a != b), None)
        where = (
            f"line {first + 1} holds {listed[first]}, expected {expected[first]}"
            if first is not None
            else f"it lists {len(listed)} wnids, expected {len(expected)}"
        )
        raise DataError(
            f"{path} is not the sorted ImageNet-1k synset list ({where}); the class indices of "
            "the labels next to it would refer to a different class order. Use labels in the "
            "sorted-synset order (the order of timm/torchvision checkpoints)"
        )


# -- layout discovery -------------------------------------------------------------------------
def _images_in(folder: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(folder) if e.is_file() and _is_image(e.name))
    except OSError:
        return []


def _wnid_dirs(root: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir() and is_wnid(e.name))
    except OSError:
        return []


def _label_file_near(folders: Sequence[Path]) -> Path | None:
    for folder in folders:
        for name in LABEL_FILES:
            if (folder / name).is_file():
                return folder / name
    return None


def _devkit_near(folders: Sequence[Path]) -> Path | None:
    for folder in folders:
        for candidate in (folder / DEVKIT, folder / f"{DEVKIT}.tar.gz"):
            if candidate.exists():
                return candidate
    return None


def _layout_below(root: Path, depth: int = 2) -> Path | None:
    """The first folder below ``root`` (breadth first) that holds val images or wnid folders."""
    level = [root]
    for _ in range(depth):
        level = sorted(
            Path(e.path) for folder in level for e in os.scandir(folder) if e.is_dir()
        )
        for folder in level:
            if _wnid_dirs(folder) or any(VAL_FILE.match(n) for n in _images_in(folder)[:50]):
                return folder
    return None


def _from_class_folders(root: Path) -> ValLayout:
    index = _wnid_index()
    unknown = [w for w in _wnid_dirs(root) if w not in index]
    if unknown:
        raise DataError(
            f"{root}: {len(unknown)} class folders are not ImageNet-1k wnids (first: {unknown[:5]}); "
            "is this the ImageNet-21k or a different dataset?"
        )
    relpaths, labels = [], []
    for wnid in _wnid_dirs(root):
        for name in _images_in(root / wnid):
            relpaths.append(f"{wnid}/{name}")
            labels.append(index[wnid])
    if not relpaths:
        raise MissingDataError(f"{root}: the wnid class folders hold no images")
    return ValLayout(root, relpaths, np.asarray(labels, dtype=np.int64), "class folders")


def missing_files_error(how: str, image_root: Path, missing: Sequence[str]) -> DataError:
    """The error (tagged ``missing-files``) for files a labels file lists that are absent."""
    return _tagged(MissingDataError(
        f"{how} lists {len(missing)} images that are not in {image_root} "
        f"(first: {list(missing[:5])}); copy them there, or use a labels file that lists "
        "only the images you have"
    ), "missing-files")


def _with_labels(
    image_root: Path, files: list[str], mapping: dict[str, int], how: str, strict: bool = True
) -> ValLayout:
    present = set(files)
    listed = sorted(mapping)
    missing: list[str] = []
    if how.startswith("labels file"):
        missing = [name for name in listed if name not in present]
        if missing and strict:
            raise missing_files_error(how, image_root, missing)
        relpaths = [name for name in listed if name in present]
    else:  # devkit / Kaggle cover all 50,000 images: use those present
        relpaths = [name for name in files if name in mapping]
        if not relpaths:
            raise DataError(
                f"none of the {len(files)} images in {image_root} is named in {how} "
                "(expected ILSVRC2012_val_<8 digits>.JPEG)"
            )
    labels = np.asarray([mapping[name] for name in relpaths], dtype=np.int64)
    return ValLayout(image_root, relpaths, labels, how, unlabelled=len(present) - len(relpaths),
                     missing=tuple(missing))


def discover(
    root: str | os.PathLike[str],
    *,
    labels: str | os.PathLike[str] | None = None,
    devkit: str | os.PathLike[str] | None = None,
    strict: bool = True,
) -> ValLayout:
    """Find the images and their labels under ``root`` (see the module docstring for the order).

    Raises :class:`MissingDataError` / :class:`DataError` that say what is wrong and how to fix
    it: the tar not extracted, a flat folder without labels, labels for missing images, ...
    With ``strict=False`` images a labels file lists but that are absent do not raise: they are
    left out and named in ``ValLayout.missing`` (for ``oodbench data check``).
    """
    root = Path(root).expanduser()
    if not root.exists():
        raise MissingDataError(f"ImageNet validation folder {root} does not exist")
    if root.is_file():
        if tarfile.is_tarfile(root):
            raise _tagged(DataError(
                f"{root} is an archive, not a folder: extract it first "
                f"(mkdir -p val && tar -xf {root} -C val) and pass the folder"
            ), "not-extracted")
        raise DataError(f"{root} is a file; pass the folder that holds the validation images")
    flat = [(root / sub, _images_in(root / sub)) for sub in IMAGE_SUBDIRS]
    flat = [(folder, files) for folder, files in flat if files]
    image_root, files = flat[0] if flat else (root, [])
    near = [image_root, root, root.parent]
    if labels is not None:
        path = Path(labels).expanduser()
        if not path.is_file():
            raise MissingDataError(f"labels file {path} does not exist")
        if not files:
            raise MissingDataError(f"{root} holds no images (looked in {', '.join(IMAGE_SUBDIRS[1:])} too)")
        return _checked(_with_labels(image_root, files, read_label_file(path), f"labels file {path}",
                                     strict))
    if _wnid_dirs(root) and not files:
        return _from_class_folders(root)
    if not files:
        archives = sorted(p.name for p in root.iterdir() if p.name.endswith((".tar", ".tar.gz", ".tgz")))
        hint = f" It holds {archives}: extract them first (tar -xf FILE -C {root})." if archives else ""
        deeper = _layout_below(root)
        if deeper is not None:
            hint += f" The images are nested deeper: pass {deeper} instead."
        kind = "nested" if deeper is not None else "not-extracted" if archives else "missing"
        raise _tagged(MissingDataError(
            f"{root} holds no ImageNet validation images (neither ILSVRC2012_val_*.JPEG files in "
            f"it or in its {', '.join(IMAGE_SUBDIRS[1:])} sub-folders, nor wnid class folders).{hint}"
        ), kind)
    label_file = _label_file_near(near)
    if label_file is not None:
        words = label_file.parent / "synset_words.txt"
        if words.is_file():
            check_synset_words(words)
        return _checked(_with_labels(image_root, files, read_label_file(label_file),
                                     f"labels file {label_file}", strict))
    for folder in near:
        if (folder / KAGGLE_SOLUTION).is_file():
            path = folder / KAGGLE_SOLUTION
            return _checked(_with_labels(image_root, files, read_kaggle_solution(path), str(path)))
    kit = Path(devkit).expanduser() if devkit is not None else _devkit_near(near)
    if kit is not None:
        if not kit.exists():
            raise MissingDataError(f"devkit {kit} does not exist")
        return _checked(_with_labels(image_root, files, read_devkit(kit), f"devkit {kit}"))
    raise _tagged(MissingDataError(
        f"{image_root} holds {len(files)} flat validation images but no labels were found "
        f"(looked for {', '.join(LABEL_FILES)}, {KAGGLE_SOLUTION} and {DEVKIT} in "
        f"{', '.join(str(f) for f in dict.fromkeys(near))}). Fix: {GETTING_LABELS}"
    ), "labels")


def _checked(layout: ValLayout) -> ValLayout:
    bad = [p for p in layout.relpaths if not VAL_FILE.match(os.path.basename(p))]
    if bad:
        raise DataError(
            f"{layout.image_root}: {len(bad)} labelled files are not named "
            f"ILSVRC2012_val_<8 digits>.JPEG (first: {bad[:5]})"
        )
    return layout


# -- the Source -----------------------------------------------------------------------------
class ImageNetVal(FileSource):
    """ImageNet-1k validation images; labels are sorted-synset indices 0-999.

    Args:
        root: the folder (flat images, ``images/`` or ``val/`` sub-folder, or wnid folders).
        labels: an explicit ``<file> <index|wnid>`` labels file.
        devkit: the ILSVRC-2012 devkit folder or ``.tar.gz`` (when not next to the images).
        name: the source name in logs and results.
        fingerprint_mode: ``"stat"`` (path, size, mtime; default) or ``"content"``.

    ``class_names`` are the 1000 wnids (as for an ImageFolder of wnid folders);
    ``descriptions`` the WordNet lemmas (``"tench, Tinca tinca"``). ``label_source`` says where
    the labels came from. Samples are ordered by relative path.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        labels: str | os.PathLike[str] | None = None,
        devkit: str | os.PathLike[str] | None = None,
        name: str = "imagenet-val",
        fingerprint_mode: str = "stat",
    ):
        check_fingerprint_mode(fingerprint_mode)
        layout = discover(root, labels=labels, devkit=devkit)
        self.root = layout.image_root
        self.name = name
        self.label_source = layout.label_source
        self.fingerprint_mode = fingerprint_mode
        self._relpaths = layout.relpaths
        self._labels = readonly_labels(layout.labels)
        self.class_names = imagenet1k_wnids()

    @property
    def descriptions(self) -> list[str]:
        """WordNet lemmas of the 1000 classes, in label order."""
        return [lemmas(w) for w in self.class_names or ()]

    def load(self, index: int) -> Image.Image:
        if not -len(self) <= index < len(self):
            raise InvalidInputError(f"{self.name}: index {index} outside [0, {len(self)})")
        return super().load(index)

    def fingerprint(self) -> str:
        return self._files_fingerprint("imagenet-val", self.fingerprint_mode)
