"""The dataset catalogue: what each standard dataset looks like on disk and where to get it.

Each entry (a :class:`DatasetInfo`, stored as data in ``data/_info/datasets.toml``) gives the
expected layout, image and class counts, the checksums that are known (with where they come
from), the licence, a public download URL where one exists and otherwise where to get the data
and where to put it. ``oodbench data check NAME PATH`` (:func:`oodbench.data.check.check`)
compares a local copy against its entry.

    from oodbench.data import catalog
    catalog.available()                 # {name: title}
    info = catalog.get("imagenet-1k-val")
    print(info.describe())

Counts and checksums are only stated where a public source gives them (see each entry's
``notes``); where a value is unknown it is ``None`` and is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated

from pydantic import RootModel

from oodbench.errors import InvalidInputError
from oodbench.registry import Registry
from oodbench.schema import CHECKED_KEYS, NamedEntries, package_file, parse_toml

#: the layouts ``oodbench.data.check`` knows (see the header of ``datasets.toml``)
LAYOUTS = (
    "imagenet-val",
    "class-folders",
    "image-folder",
    "imagenet21k",
    "image-lists",
    "cifar-python",
)
#: class-name sets a ``class-folders`` entry may require
CLASS_SETS = ("imagenet-1k",)


@dataclass(frozen=True)
class Download:
    """One archive of a dataset: a public ``url`` (``""`` when there is none) and its checksum."""

    filename: str
    url: str = ""
    md5: str | None = None
    sha256: str | None = None
    checksum_source: str = ""

    @property
    def has_checksum(self) -> bool:
        return bool(self.md5 or self.sha256)


@dataclass(frozen=True)
class ImageListFile:
    """An OpenOOD ``benchmark_imglist`` file: ``path label`` lines relative to ``images``."""

    path: str
    images: str
    count: int | None = None
    role: str = ""
    note: str = ""


@dataclass(frozen=True)
class DatasetInfo:
    """A catalogue entry. ``None`` counts are unknown and not checked."""

    name: str
    title: str
    layout: str
    num_images: int | None = None
    num_classes: int | None = None
    licence: str = ""
    homepage: str = ""
    paper: str = ""
    manual: str = ""
    notes: str = ""
    class_set: str | None = None
    downloads: tuple[Annotated[Download, CHECKED_KEYS], ...] = ()
    image_lists: tuple[Annotated[ImageListFile, CHECKED_KEYS], ...] = ()
    manifest: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise InvalidInputError(
                f"dataset {self.name!r}: layout {self.layout!r} is not one of {LAYOUTS}"
            )
        if self.class_set is not None and self.class_set not in CLASS_SETS:
            raise InvalidInputError(
                f"dataset {self.name!r}: class_set {self.class_set!r} is not one of {CLASS_SETS}"
            )
        for key in ("num_images", "num_classes"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or int(value) < 0):
                raise InvalidInputError(f"dataset {self.name!r}: {key} must be >= 0; got {value!r}")
        if self.layout == "image-lists" and not self.image_lists:
            raise InvalidInputError(f"dataset {self.name!r}: layout image-lists needs image_lists")

    #: a dataset has no settings of its own (the registry protocol's ``settings``)
    settings = None

    @property
    def description(self) -> str:
        """Its title (the registry listing's description)."""
        return self.title

    @property
    def needs(self) -> frozenset[str]:
        """What a user must do besides ``oodbench data download``: ``"manual download"`` when
        an archive has no public URL (the registry protocol's ``needs``)."""
        return frozenset({"manual download"}) if len(self.public_downloads) < len(self.downloads) \
            else frozenset()

    @property
    def public_downloads(self) -> tuple[Download, ...]:
        """The archives that have a public URL."""
        return tuple(d for d in self.downloads if d.url)

    def where_to_get(self) -> str:
        """Where to get the data and where to put it (the text ``data info`` prints)."""
        lines = [self.manual.strip()] if self.manual else []
        for d in self.downloads:
            checksum = (
                f"md5 {d.md5}" if d.md5 else f"sha256 {d.sha256}" if d.sha256 else "no checksum known"
            )
            where = d.url or "no public URL (see above)"
            lines.append(f"{d.filename}: {where} ({checksum})")
        if self.public_downloads:
            lines.append(f"or: oodbench data download {self.name} DIR")
        return "\n".join(lines)

    def describe(self) -> str:
        """A multi-line human-readable summary of the entry."""

        def count(value: int | None) -> str:
            return f"{value:,}" if value is not None else "not checked (unknown)"

        rows = [
            f"{self.name}: {self.title}",
            f"  layout:   {self.layout}",
            f"  images:   {count(self.num_images)}",
            f"  classes:  {count(self.num_classes)}",
            f"  licence:  {self.licence or 'see homepage'}",
            f"  homepage: {self.homepage}",
            f"  paper:    {self.paper}",
        ]
        for lst in self.image_lists:
            lines = f"{lst.count:,} lines" if lst.count is not None else "line count unknown"
            role = f"; {lst.role}" if lst.role else ""
            rows.append(f"  list:     {lst.path} ({lines}; images under {lst.images}/{role})")
        if self.manifest:
            rows.append(f"  manifest: md5 of {len(self.manifest)} files")
        rows.append("where to get it:")
        rows.append("  " + self.where_to_get().replace("\n", "\n  "))
        if self.notes:
            rows.append("notes: " + " ".join(self.notes.split()))
        return "\n".join(rows)


class Catalogue(RootModel[NamedEntries[DatasetInfo]]):
    """A dataset catalogue file: one ``[<name>]`` table per :class:`DatasetInfo`."""


def parse(text: str, file: str = "dataset catalogue") -> dict[str, DatasetInfo]:
    """Entries from TOML text in the format of ``data/_info/datasets.toml`` (``ConfigError``
    naming ``file``, the entry and the key)."""
    return parse_toml(Catalogue, text, file=file).root


@lru_cache(maxsize=1)
def _builtin() -> dict[str, DatasetInfo]:
    text, file = package_file("oodbench.data", "_info/datasets.toml")
    return parse(text, file)


def datasets() -> Registry[DatasetInfo]:
    """The catalogue as a registry (entries are data: ``datasets.toml``, read once)."""
    found: Registry[DatasetInfo] = Registry("dataset")
    for info in _builtin().values():
        found.add(info)
    return found


def available() -> dict[str, str]:
    """Every catalogue entry: name -> title."""
    return {name: info.title for name, info in datasets().items()}


def get(name: str) -> DatasetInfo:
    """The catalogue entry ``name`` (``UnknownNameError`` with the closest names)."""
    return datasets().lookup(name)
