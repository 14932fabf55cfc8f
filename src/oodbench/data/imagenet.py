"""ImageNet-1k and ImageNet-21k class information, from the files timm ships.

timm's wheel carries the synset lists, lemmas and definitions of the ImageNet releases under
``timm/data/_info/``; they are read from there (without importing timm or torch), so class
information works offline. A wnid is ``"n"`` followed by the 8-digit offset of a WordNet 3.0
noun synset (``n01440764`` = tench).

    imagenet1k_wnids()          # 1000 wnids in the standard (sorted) class-index order
    imagenet21k_wnids("goog")   # 21,843 wnids of the original ImageNet-21k (fall11) release
    lemmas("n01440764")         # "tench, Tinca tinca"
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from oodbench.errors import (
    InvalidInputError,
    MissingDataError,
    MissingDependencyError,
    UnknownNameError,
)

#: which timm ``_info`` file lists the synsets of each ImageNet-21k variant
IMAGENET21K_VARIANTS = {
    "goog": "imagenet21k_goog_synsets.txt",  # original Google/fall11 21k (timm in21k weights)
    "22k": "imagenet22k_synsets.txt",  # winter21 / ImageNet-22k ordering used by timm
    "22k_ms": "imagenet22k_ms_synsets.txt",  # Microsoft's 22k ordering (1k classes first)
    "miil": "imagenet21k_miil_synsets.txt",  # the 11k-class ImageNet-21k-P of Ridnik et al.
    "12k": "imagenet12k_synsets.txt",
}

_WNID = re.compile(r"^n\d{8}$")


def is_wnid(value: str) -> bool:
    """Whether ``value`` looks like a WordNet noun id (``n`` + 8 digits)."""
    return bool(_WNID.match(value))


def check_wnids(values: Iterable[str], *, what: str = "wnids") -> list[str]:
    """The values as a list; ``InvalidInputError`` naming the first few malformed ones."""
    values = [str(v).strip() for v in values]
    bad = [v for v in values if not is_wnid(v)]
    if bad:
        raise InvalidInputError(
            f"{what}: {len(bad)} value(s) are not WordNet noun ids like 'n01440764' "
            f"(first: {bad[:5]})"
        )
    return values


def offset_to_wnid(offset: int | str) -> str:
    """``1440764`` or ``"01440764"`` -> ``"n01440764"``."""
    return f"n{int(offset):08d}"


def wnid_to_offset(wnid: str) -> int:
    """``"n01440764"`` -> ``1440764`` (the WordNet 3.0 noun offset)."""
    check_wnids([wnid])
    return int(wnid[1:])


def info_dir() -> Path:
    """timm's ``timm/data/_info`` folder (found without importing timm)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("ImageNet class information comes from timm: pip install timm")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "_info"
    if not path.is_dir():
        raise MissingDataError(f"{path} is missing: reinstall timm (>= 0.9 ships the class lists)")
    return path


@cache
def _read_lines(name: str) -> tuple[str, ...]:
    path = info_dir() / name
    if not path.is_file():
        raise MissingDataError(f"{path} is missing: reinstall timm (>= 1.0 ships it)")
    return tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


@cache
def _read_table(name: str) -> dict[str, str]:
    return dict(line.split("\t", 1) for line in _read_lines(name))  # type: ignore[misc]


def imagenet1k_wnids() -> list[str]:
    """The 1000 ILSVRC-2012 wnids in the standard class-index order (sorted)."""
    return list(_read_lines("imagenet_synsets.txt"))


def imagenet21k_wnids(variant: str = "goog") -> list[str]:
    """The wnids of an ImageNet-21k release in its class-index order.

    ``variant``: ``"goog"`` (21,843 classes of the original release, default), ``"22k"``
    (21,841, winter21), ``"22k_ms"``, ``"miil"`` (ImageNet-21k-P, 10,450) or ``"12k"``.
    """
    if variant not in IMAGENET21K_VARIANTS:
        raise UnknownNameError("ImageNet-21k variant", variant, IMAGENET21K_VARIANTS)
    return list(_read_lines(IMAGENET21K_VARIANTS[variant]))


def lemmas(wnid: str) -> str:
    """The synset's words, comma-separated (``"tench, Tinca tinca"``); ``""`` when unknown."""
    return _read_table("imagenet_synset_to_lemma.txt").get(wnid, "")


def definition(wnid: str) -> str:
    """The synset's WordNet gloss; ``""`` when unknown."""
    return _read_table("imagenet_synset_to_definition.txt").get(wnid, "")


def class_name(wnid: str) -> str:
    """A short readable name: the first lemma (``"tench"``), or the wnid when unknown."""
    return lemmas(wnid).split(",")[0].strip() or wnid


def imagenet1k_class_names() -> list[str]:
    """The first lemma of each ImageNet-1k class, in class-index order."""
    return [class_name(w) for w in imagenet1k_wnids()]
