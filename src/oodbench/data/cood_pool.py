"""Build the C-OOD class pool from an ImageNet-21k folder (Galil et al., ICLR 2023, Sec. 4).

Starting from the ImageNet-21k synsets (timm's class list), the pool drops, in this order
(each removed class is counted under the first rule that removes it):

1. ``imagenet1k``: the ID classes themselves (ImageNet-1k by default);
2. ``hierarchy``: WordNet ancestors and descendants of an ID class (on by default; a "dog"
   or a "Chihuahua puppy" class is not cleanly OOD for an ImageNet-1k model);
3. ``excluded``: wnids the user lists (the paper removes visually ambiguous objects by hand,
   and keeps look-alike species as OOD);
4. ``missing``: no folder of that wnid under the root;
5. ``too_few_images``: fewer than ``min_images`` images (the paper: 200).

Every kept class contributes ``min_images`` images sampled with a seed (per class, so one class's
sample does not depend on which other classes are kept). The pool is written as an OpenOOD-style
image list (``<wnid>/<file> <label>`` lines, label = index of the wnid in the sorted kept
classes) plus a ``<stem>_classes.txt`` file with one wnid per label.

    report = build_pool("/data/imagenet21k", out="pool.txt")
    print(report.summary())
    pool = pool_source("pool.txt", "/data/imagenet21k")   # a Source for CoodBenchmark
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oodbench.data.image_list import ImageList
from oodbench.data.imagenet import check_wnids, imagenet1k_wnids, imagenet21k_wnids, is_wnid
from oodbench.data.wordnet import load_hierarchy
from oodbench.errors import DataError, EmptyInputError, InvalidInputError, MissingDataError

IMAGE_EXTENSIONS = frozenset({".jpeg", ".jpg", ".png", ".bmp", ".webp"})
#: removal rules, in the order they are applied
RULES = ("imagenet1k", "hierarchy", "excluded", "missing", "too_few_images")


@dataclass
class PoolReport:
    """The pool that ``build_pool`` kept and why the other classes were removed.

    Attributes:
        root: the ImageNet-21k folder (one sub-folder of images per wnid).
        classes: kept wnids, sorted; the label of a class is its index here.
        files: per kept wnid, its sampled image paths relative to ``root`` (sorted).
        removed: per rule of ``RULES``, the wnids it removed (sorted).
        candidates: how many synsets the class list started with.
    """

    root: Path
    classes: list[str]
    files: dict[str, list[str]]
    removed: dict[str, list[str]] = field(default_factory=dict)
    candidates: int = 0

    @property
    def n_images(self) -> int:
        return sum(len(v) for v in self.files.values())

    def lines(self) -> list[str]:
        """The image list: ``<relative path> <label>`` per image, classes in label order."""
        return [f"{path} {label}" for label, w in enumerate(self.classes) for path in self.files[w]]

    def write(self, out: str | Path) -> tuple[Path, Path]:
        """Write the image list to ``out`` and the wnid of each label to ``<stem>_classes.txt``."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        classes_file = out.with_name(f"{out.stem}_classes.txt")
        for path, text in ((out, self.lines()), (classes_file, self.classes)):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(f"{line}\n" for line in text), encoding="utf-8")
            os.replace(tmp, path)
        return out, classes_file

    def summary(self) -> str:
        """How many classes and images remain and how many classes each rule removed."""
        width = max(len(r) for r in RULES)
        lines = [f"candidate synsets: {self.candidates}"]
        lines += [f"  removed by {rule:<{width}}: {len(self.removed.get(rule, []))}" for rule in RULES]
        lines.append(f"kept: {len(self.classes)} classes, {self.n_images} images")
        return "\n".join(lines)


def read_wnid_list(path: str | Path) -> list[str]:
    """wnids from a text file: the first token of each line; blank and ``#`` lines skipped."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"exclusion list {path} does not exist")
    tokens = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            tokens.append(line.split()[0])
    return check_wnids(tokens, what=f"exclusion list {path}")


def _exclusions(exclude: Iterable[str | Path]) -> set[str]:
    """wnids from a mix of wnids and paths of wnid-list files."""
    out: set[str] = set()
    for item in exclude:
        if isinstance(item, str) and is_wnid(item.strip()):
            out.add(item.strip())
        else:
            out.update(read_wnid_list(item))
    return out


def _list_images(folder: Path) -> list[str]:
    with os.scandir(folder) as it:
        return sorted(
            e.name
            for e in it
            if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS
        )


def build_pool(
    root: str | Path,
    *,
    out: str | Path | None = None,
    min_images: int = 200,
    seed: int = 0,
    exclude: Iterable[str | Path] = (),
    exclude_hierarchy: bool = True,
    id_wnids: Sequence[str] | None = None,
    variant: str = "goog",
) -> PoolReport:
    """Select the C-OOD pool classes under ``root`` (``root/<wnid>/<image>``) and sample images.

    Args:
        root: the extracted ImageNet-21k training folder, one sub-folder per wnid.
        out: when given, write the image list there (see ``PoolReport.write``).
        min_images: keep classes with at least this many images and sample exactly this many.
        seed: seeds the per-class sampling (class ``w`` uses ``default_rng([seed, offset(w)])``).
        exclude: wnids, or files listing wnids, to remove by hand.
        exclude_hierarchy: remove WordNet ancestors and descendants of the ID classes.
        id_wnids: the ID classes (default: the 1000 ImageNet-1k wnids).
        variant: which timm ImageNet-21k class list to start from (``imagenet21k_wnids``).
    """
    root = Path(root)
    if not root.is_dir():
        raise MissingDataError(
            f"ImageNet-21k folder {root} does not exist; expected one sub-folder of images per "
            f"wnid (e.g. {root}/n00005787/n00005787_1.JPEG)"
        )
    if min_images < 2:
        raise InvalidInputError(f"min_images must be >= 2 (estimation + test); got {min_images}")
    candidates = imagenet21k_wnids(variant)
    ids = set(imagenet1k_wnids() if id_wnids is None else check_wnids(id_wnids, what="id_wnids"))
    excluded = _exclusions(exclude)
    related = load_hierarchy().related(candidates, ids) if exclude_hierarchy else {}
    with os.scandir(root) as it:
        present = {e.name for e in it if e.is_dir()}
    if present.isdisjoint(candidates):
        raise DataError(
            f"{root} holds no folder named after an ImageNet-21k wnid; expected "
            f"{root}/<wnid>/<images> (extract the per-class tar files first)"
        )

    removed: dict[str, list[str]] = {rule: [] for rule in RULES}
    files: dict[str, list[str]] = {}
    for wnid in candidates:
        if wnid in ids:
            removed["imagenet1k"].append(wnid)
        elif wnid in related:
            removed["hierarchy"].append(wnid)
        elif wnid in excluded:
            removed["excluded"].append(wnid)
        elif wnid not in present:
            removed["missing"].append(wnid)
        else:
            names = _list_images(root / wnid)
            if len(names) < min_images:
                removed["too_few_images"].append(wnid)
                continue
            rng = np.random.default_rng([seed, int(wnid[1:])])
            pick = np.sort(rng.choice(len(names), size=min_images, replace=False))
            files[wnid] = [f"{wnid}/{names[i]}" for i in pick]
    report = PoolReport(
        root=root,
        classes=sorted(files),
        files=files,
        removed={rule: sorted(v) for rule, v in removed.items()},
        candidates=len(candidates),
    )
    if not report.classes:
        raise EmptyInputError(f"no class of {root} is left in the pool:\n{report.summary()}")
    if out is not None:
        report.write(out)
    return report


def pool_source(list_file: str | Path, root: str | Path) -> ImageList:
    """The pool written by ``build_pool`` as a ``Source`` whose class names are the wnids."""
    list_file = Path(list_file)
    classes_file = list_file.with_name(f"{list_file.stem}_classes.txt")
    if not classes_file.is_file():
        raise MissingDataError(
            f"{classes_file} is missing: it is written next to {list_file} by "
            "`oodbench cood-pool build` (one wnid per label)"
        )
    wnids = check_wnids(classes_file.read_text(encoding="utf-8").split(), what=str(classes_file))
    return ImageList(list_file, root, name=list_file.stem, class_names=wnids)
