"""Benchmarks as data: a benchmark file (TOML) names the ID test set, the OOD sets (near / far),
the metrics to headline and the aggregation; it is read as a :class:`BenchmarkFile` and ``build``
turns it into an :class:`OodSetsBenchmark`.

A benchmark file (the built-in ones live in ``benchmarks/specs/*.toml``)::

    name = "my-benchmark"
    description = "ImageNet val vs two folders"
    headline = ["auroc", "fpr95_id"]      # keys of oodbench.metrics.evaluate
    aggregate = "mean"                    # OpenOOD's unweighted mean per kind, or "none"
    root = "/data"                        # optional; paths below are relative to it

    [id]
    source = "imagenet-val"               # or "folder", or "imglist"
    path = "imagenet/val"

    [[ood]]
    group = "textures"
    kind = "far"                          # "near" or "far" (optional)
    source = "folder"
    path = "dtd/images"
    dataset = "dtd"                       # optional catalogue entry: where to get it, checks

``source = "imglist"`` takes ``list`` (an OpenOOD image-list file) and ``images`` (the folder
its paths are relative to) instead of ``path``. Optional sets ``[id_val]`` and ``[ood_val]``
describe OpenOOD's validation splits (for hyper-parameter search).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StrictInt, StrictStr, field_validator, model_validator

from oodbench.benchmarks.kinds import named_benchmarks
from oodbench.benchmarks.standard import (
    AGGREGATES,
    AGGREGATIONS,
    KINDS,
    METRICS,
    Data,
    OodSetsBenchmark,
)
from oodbench.data import catalog
from oodbench.data.source import Source
from oodbench.errors import (
    ConfigError,
    DataError,
    EmptyInputError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)
from oodbench.extract.activations import Activations
from oodbench.schema import At, Schema, load, one_of, parse

#: how a set's images are read
SOURCES = ("imglist", "folder", "imagenet-val")


class SetSpec(Schema):
    """One image set of a benchmark file: how to read it and, for OOD sets, its group and kind."""

    source: Annotated[StrictStr, one_of(SOURCES)] = Field(
        description=f"how the images are read: one of {', '.join(SOURCES)}")
    path: StrictStr = ""
    list: StrictStr = ""
    images: StrictStr = ""
    group: StrictStr = ""
    kind: Annotated[StrictStr | None, one_of(KINDS)] = None
    dataset: StrictStr | None = None

    @field_validator("dataset")
    @classmethod
    def _catalogued(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                catalog.get(name)
            except UnknownNameError as err:
                raise ValueError(str(err)) from None
        return name

    @model_validator(mode="after")
    def _readable(self) -> SetSpec:
        if self.source == "imglist" and not (self.list and self.images):
            raise ValueError("source 'imglist' needs `list` and `images`")
        if self.source != "imglist" and not self.path:
            raise ValueError(f"source {self.source!r} needs `path`")
        return self


class BenchmarkFile(Schema):
    """A validated benchmark file: a near / far OOD-sets benchmark as data (see the module
    docstring for the TOML form). Not an experiment's ``[[benchmarks]]`` entry
    (:class:`~oodbench.benchmarks.kinds.BenchmarkEntry`), which may name one of these."""

    name: StrictStr = Field(description="the benchmark's name, a non-empty string")
    id: SetSpec = Field(description="the ID test set `[id]`")
    ood: tuple[SetSpec, ...] = Field(description="the OOD sets, `[[ood]]` tables")
    description: StrictStr = ""
    paper: StrictStr = ""
    num_classes: StrictInt | None = None
    headline: tuple[StrictStr, ...] = ("auroc", "fpr95_ood")
    aggregate: Annotated[StrictStr, one_of(AGGREGATIONS)] = "mean"
    root: StrictStr | None = None
    data: StrictStr = ""
    id_val: SetSpec | None = None
    ood_val: SetSpec | None = None

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        if not name:
            raise ValueError("`name` must be a non-empty string")
        return name

    @field_validator("id", "id_val", "ood_val")
    @classmethod
    def _id_set(cls, value: SetSpec | None) -> SetSpec | None:
        if value is not None and {"group", "kind"} & value.model_fields_set:
            raise ValueError("only OOD sets take `group` and `kind`")
        return value

    @field_validator("ood")
    @classmethod
    def _ood_sets(cls, sets: tuple[SetSpec, ...]) -> tuple[SetSpec, ...]:
        if not sets:
            raise ValueError("at least one OOD set `[[ood]]` is required")
        for i, s in enumerate(sets):
            if not s.group:
                raise At(f"[[ood]] #{i + 1}", "an OOD set needs a `group` name")
        groups = [s.group for s in sets]
        repeated = sorted({g for g in groups if groups.count(g) > 1})
        if repeated:
            raise ValueError(f"OOD group names repeat: {repeated}")
        reserved = sorted(set(groups) & set(AGGREGATES))
        if reserved:
            raise ValueError(f"{reserved} name the average rows; rename those OOD sets")
        return sets

    @field_validator("headline")
    @classmethod
    def _metrics(cls, headline: tuple[str, ...]) -> tuple[str, ...]:
        wrong = [m for m in headline if m not in METRICS]
        if wrong:
            raise ValueError(f"headline metrics {wrong} are not among {METRICS}")
        return headline

    @field_validator("num_classes")
    @classmethod
    def _classes(cls, num_classes: int | None) -> int | None:
        if num_classes is not None and num_classes < 1:
            raise ValueError("num_classes must be a positive integer")
        return num_classes

    @property
    def kinds(self) -> dict[str, str]:
        return {s.group: s.kind for s in self.ood if s.kind}

    @property
    def datasets(self) -> list[str]:
        """The catalogue entries the file's sets come from (in order, without repeats)."""
        sets = [self.id, *self.ood, self.id_val, self.ood_val]
        return list(dict.fromkeys(s.dataset for s in sets if s is not None and s.dataset))


def parse_spec(raw: Mapping[str, Any], *, file: str | os.PathLike[str] = "benchmark spec"
               ) -> BenchmarkFile:
    """Validate a benchmark file given as a dict (as read from TOML); every mistake raises one
    :class:`~oodbench.errors.ConfigError` naming ``file`` and the key."""
    return parse(BenchmarkFile, raw, file=str(file))


def read_file(path: str | os.PathLike[str]) -> BenchmarkFile:
    """The benchmark file at ``path``, validated (errors name the file and the key)."""
    path = Path(path).expanduser()
    return load(BenchmarkFile, path, what="benchmark spec", error=ConfigError)[0]


def builtin_paths() -> dict[str, Path]:
    """The built-in specs: name (the file stem) -> path."""
    folder = Path(__file__).with_name("specs")
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}


def builtin(name: str) -> BenchmarkFile:
    """The built-in benchmark file ``name`` (``UnknownNameError`` with the closest names)."""
    paths = builtin_paths()
    if name not in paths:
        raise UnknownNameError("benchmark", name, named_benchmarks())
    spec = read_file(paths[name])
    if spec.name != name:
        raise InvalidInputError(f"{paths[name]} is named {spec.name!r}; the file stem must match")
    return spec


# -- building ----------------------------------------------------------------------------------
def _where_to_get(s: SetSpec) -> str:
    if not s.dataset:
        return ""
    info = catalog.get(s.dataset)
    return (
        f" Where to get it: {' '.join(info.where_to_get().split())} "
        f"Check a copy with: oodbench data check {s.dataset} PATH"
    )


def _source(s: SetSpec, key: str, root: Path | None, override: Any, spec: BenchmarkFile) -> Data:
    if isinstance(override, (Source, Activations)):
        return override
    base = Path(override).expanduser() if override is not None else root
    if base is None:
        raise InvalidInputError(
            f"benchmark {spec.name!r} needs to know where its data is: pass root=<data folder> "
            f"or paths={{{key!r}: ...}}. {spec.data}".strip()
        )
    name = s.group or f"{s.dataset or spec.name}:{key}"  # "ssb_hard", "openood-imagenet:id"
    try:
        if s.source == "imglist":
            from oodbench.data import ImageList

            return ImageList(base / s.list, base / s.images, name=name)
        target = base / s.path if override is None else base
        if s.source == "folder":
            from oodbench.data import ImageFolder

            return ImageFolder(target, name=name)
        from oodbench.data.imagenet_val import ImageNetVal

        return ImageNetVal(target, name=name)
    except (DataError, EmptyInputError) as err:
        cls = MissingDataError if isinstance(err, MissingDataError) else DataError
        text = str(err).rstrip(". ")
        raise cls(f"benchmark {spec.name!r}, set {key!r}: {text}.{_where_to_get(s)}") from err


def build(
    spec: BenchmarkFile,
    *,
    root: str | os.PathLike[str] | None = None,
    paths: Mapping[str, Any] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> OodSetsBenchmark:
    """The benchmark described by ``spec``, reading its data below ``root``.

    Args:
        root: the data folder the spec's paths are relative to (default: the spec's ``root``,
            itself relative to ``base_dir``).
        paths: per set (``"id"``, ``"id_val"``, ``"ood_val"`` or an OOD group name): a Source
            or Activations to use as they are, or a folder: for ``folder`` / ``imagenet-val``
            sets the set's own folder, for ``imglist`` sets the data folder that replaces
            ``root`` (it holds the list and the images folder).
        base_dir: where a relative ``root`` of the spec is resolved (the TOML file's folder).
    """
    paths = dict(paths or {})
    known = {"id", "id_val", "ood_val", *(s.group for s in spec.ood)}
    unknown = sorted(set(paths) - known)
    if unknown:
        raise UnknownNameError(f"set of benchmark {spec.name!r}", unknown[0], known)
    if root is None and spec.root is not None:
        root = Path(base_dir or ".") / Path(spec.root).expanduser()
    top = Path(root).expanduser() if root is not None else None

    def make(s: SetSpec | None, key: str) -> Data | None:
        return None if s is None else _source(s, key, top, paths.get(key), spec)

    id_test = make(spec.id, "id")
    assert id_test is not None
    ood = {s.group: make(s, s.group) for s in spec.ood}
    return OodSetsBenchmark(
        id_test,
        ood,  # type: ignore[arg-type]  # no None: every OOD set has a spec
        kinds=spec.kinds,
        name=spec.name,
        headline=spec.headline,
        aggregate=spec.aggregate,
        id_val=make(spec.id_val, "id_val"),
        ood_val=make(spec.ood_val, "ood_val"),
        description=spec.description,
        paper=spec.paper,
    )


def build_with_options(parsed: BenchmarkFile, options: Mapping[str, Any],
                       base_dir: Path | None) -> OodSetsBenchmark:
    """:func:`build` with the options of ``benchmarks.get`` (``root`` and ``paths`` only)."""
    unknown = sorted(set(options) - {"root", "paths"})
    if unknown:
        raise InvalidInputError(
            f"benchmark {parsed.name!r} takes the options root= and paths=; got {unknown}"
        )
    return build(parsed, root=options.get("root"), paths=options.get("paths"), base_dir=base_dir)
