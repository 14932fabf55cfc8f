"""Benchmarks as data: a TOML spec names the ID test set, the OOD sets (near / far), the
metrics to headline and the aggregation; ``build`` turns it into an :class:`OodSetsBenchmark`.

A spec (the built-in ones live in ``benchmarks/specs/*.toml``)::

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oodbench.benchmarks.standard import (
    AGGREGATES,
    AGGREGATIONS,
    KINDS,
    METRICS,
    Data,
    OodSetsBenchmark,
)
from oodbench.data.source import Source
from oodbench.errors import (
    DataError,
    EmptyInputError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)
from oodbench.extract.activations import Activations
from oodbench.schema import loads_toml

SOURCES = ("imglist", "folder", "imagenet-val")
TOP_KEYS = frozenset(
    {"name", "description", "paper", "num_classes", "headline", "aggregate", "root", "data",
     "id", "id_val", "ood_val", "ood"}
)
SET_KEYS = frozenset({"group", "kind", "source", "path", "list", "images", "dataset"})


@dataclass(frozen=True)
class SetSpec:
    """One image set of a spec: how to read it and, for OOD sets, its group and kind."""

    source: str
    path: str = ""
    list: str = ""
    images: str = ""
    group: str = ""
    kind: str | None = None
    dataset: str | None = None


@dataclass(frozen=True)
class BenchmarkSpec:
    """A validated benchmark spec (see the module docstring for the TOML form)."""

    name: str
    id: SetSpec
    ood: tuple[SetSpec, ...]
    description: str = ""
    paper: str = ""
    num_classes: int | None = None
    headline: tuple[str, ...] = ("auroc", "fpr95_ood")
    aggregate: str = "mean"
    root: str | None = None
    data: str = ""
    id_val: SetSpec | None = None
    ood_val: SetSpec | None = None

    @property
    def kinds(self) -> dict[str, str]:
        return {s.group: s.kind for s in self.ood if s.kind}

    @property
    def datasets(self) -> list[str]:
        """The catalogue entries the spec's sets come from (in order, without repeats)."""
        sets = [self.id, *self.ood, self.id_val, self.ood_val]
        return list(dict.fromkeys(s.dataset for s in sets if s is not None and s.dataset))


def _set(raw: Any, where: str, *, ood: bool) -> SetSpec:
    if not isinstance(raw, Mapping):
        raise InvalidInputError(f"{where} must be a table; got {type(raw).__name__}")
    unknown = sorted(set(raw) - SET_KEYS)
    if unknown:
        raise InvalidInputError(f"{where}: unknown keys {unknown}; valid keys: {sorted(SET_KEYS)}")
    source = raw.get("source")
    if source not in SOURCES:
        raise InvalidInputError(f"{where}: source must be one of {SOURCES}; got {source!r}")
    if source == "imglist" and not (raw.get("list") and raw.get("images")):
        raise InvalidInputError(f"{where}: source 'imglist' needs `list` and `images`")
    if source != "imglist" and not raw.get("path"):
        raise InvalidInputError(f"{where}: source {source!r} needs `path`")
    if ood and not raw.get("group"):
        raise InvalidInputError(f"{where}: an OOD set needs a `group` name")
    if not ood and ("group" in raw or "kind" in raw):
        raise InvalidInputError(f"{where}: only OOD sets take `group` and `kind`")
    kind = raw.get("kind")
    if kind is not None and kind not in KINDS:
        raise InvalidInputError(f"{where}: kind must be one of {KINDS}; got {kind!r}")
    dataset = raw.get("dataset")
    if dataset is not None:
        from oodbench.data import catalog

        catalog.get(dataset)  # UnknownNameError with the closest entries
    return SetSpec(
        source=source,
        path=str(raw.get("path", "")),
        list=str(raw.get("list", "")),
        images=str(raw.get("images", "")),
        group=str(raw.get("group", "")),
        kind=kind,
        dataset=dataset,
    )


def parse_spec(raw: Mapping[str, Any]) -> BenchmarkSpec:
    """Validate a spec given as a dict (as read from TOML); ``InvalidInputError`` on any mistake."""
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise InvalidInputError(f"benchmark spec: unknown keys {unknown}; valid keys: {sorted(TOP_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInputError("benchmark spec: `name` (a non-empty string) is required")
    where = f"benchmark spec {name!r}"
    if "id" not in raw:
        raise InvalidInputError(f"{where}: the ID test set `[id]` is required")
    ood_raw = raw.get("ood")
    if not isinstance(ood_raw, list) or not ood_raw:
        raise InvalidInputError(f"{where}: at least one OOD set `[[ood]]` is required")
    ood = tuple(_set(s, f"{where}, ood set {i}", ood=True) for i, s in enumerate(ood_raw))
    groups = [s.group for s in ood]
    repeated = sorted({g for g in groups if groups.count(g) > 1})
    if repeated:
        raise InvalidInputError(f"{where}: OOD group names repeat: {repeated}")
    reserved = sorted(set(groups) & set(AGGREGATES))
    if reserved:
        raise InvalidInputError(f"{where}: {reserved} name the average rows; rename those OOD sets")
    headline = tuple(raw.get("headline", ("auroc", "fpr95_ood")))
    wrong = [m for m in headline if m not in METRICS]
    if wrong:
        raise InvalidInputError(f"{where}: headline metrics {wrong} are not among {METRICS}")
    aggregate = raw.get("aggregate", "mean")
    if aggregate not in AGGREGATIONS:
        raise InvalidInputError(f"{where}: aggregate must be one of {AGGREGATIONS}; got {aggregate!r}")
    num_classes = raw.get("num_classes")
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise InvalidInputError(f"{where}: num_classes must be a positive integer")
    optional = {
        key: _set(raw[key], f"{where}, [{key}]", ood=False) if key in raw else None
        for key in ("id_val", "ood_val")
    }
    return BenchmarkSpec(
        name=name,
        id=_set(raw["id"], f"{where}, [id]", ood=False),
        ood=ood,
        description=str(raw.get("description", "")),
        paper=str(raw.get("paper", "")),
        num_classes=num_classes,
        headline=headline,
        aggregate=aggregate,
        root=raw.get("root"),
        data=str(raw.get("data", "")),
        **optional,
    )


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML file at ``path`` as a dict (``InvalidInputError`` naming the file if invalid)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingDataError(f"benchmark spec {path} does not exist")
    return loads_toml(path.read_text(encoding="utf-8"), origin=f"benchmark spec {path}",
                      error=InvalidInputError)


def builtin_paths() -> dict[str, Path]:
    """The built-in specs: name (the file stem) -> path."""
    folder = Path(__file__).with_name("specs")
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}


def builtin(name: str) -> BenchmarkSpec:
    """The built-in spec ``name`` (``UnknownNameError`` with the closest names)."""
    paths = builtin_paths()
    if name not in paths:
        raise UnknownNameError("benchmark", name, [*paths, "cood"])
    spec = parse_spec(read_toml(paths[name]))
    if spec.name != name:
        raise InvalidInputError(f"{paths[name]} is named {spec.name!r}; the file stem must match")
    return spec


# -- building ----------------------------------------------------------------------------------
def _where_to_get(s: SetSpec) -> str:
    if not s.dataset:
        return ""
    from oodbench.data import catalog

    info = catalog.get(s.dataset)
    return (
        f" Where to get it: {' '.join(info.where_to_get().split())} "
        f"Check a copy with: oodbench data check {s.dataset} PATH"
    )


def _source(s: SetSpec, key: str, root: Path | None, override: Any, spec: BenchmarkSpec) -> Data:
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
    spec: BenchmarkSpec,
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


def build_with_options(parsed: BenchmarkSpec, options: Mapping[str, Any],
                       base_dir: Path | None) -> OodSetsBenchmark:
    """:func:`build` with the options of ``benchmarks.get`` (``root`` and ``paths`` only)."""
    unknown = sorted(set(options) - {"root", "paths"})
    if unknown:
        raise InvalidInputError(
            f"benchmark {parsed.name!r} takes the options root= and paths=; got {unknown}"
        )
    return build(parsed, root=options.get("root"), paths=options.get("paths"), base_dir=base_dir)
