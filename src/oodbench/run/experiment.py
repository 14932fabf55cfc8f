"""Experiment files: what to run, as TOML, parsed into frozen dataclasses.

An experiment lists models, the ID sources, benchmarks and detectors; the planner
(:mod:`oodbench.run.plan`) turns it into cells. Relative paths are resolved against the folder
of the TOML file. A complete, commented example is ``examples/experiment.toml``::

    [experiment]
    name = "resnets"
    output = "results/resnets"      # results.parquet, scores/, report.html go here
    device = "auto"                 # "cpu", "cuda", "cuda:1", "auto"
    batch_size = 64

    [[models]]
    spec = "timm:resnet50"          # anything oodbench.models.load accepts

    [id]
    test = { folder = "/data/imagenet/val" }      # ImageFolder: <root>/<class>/<image>
    fit = { list = "train.txt", root = "/data/imagenet/train" }   # for KNN, ViM, ...

    [[benchmarks]]
    type = "cood"                   # C-OOD severity benchmark (Galil et al., ICLR 2023)
    pool = { list = "in21k_pool.txt", root = "/data/imagenet21k" }

    [[detectors]]
    name = "knn"
    grid = { k = [10, 50, 100] }    # one cell per value

Every mistake raises :class:`ExperimentError` naming the file, the field and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodbench.errors import InvalidInputError, MissingDataError, OodbenchError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: values of ``[experiment].amp`` (see ``oodbench.extract``)
AMP_OPTIONS = ("auto", "off", "bf16", "fp16")
#: kinds of OOD group a custom benchmark may declare
GROUP_KINDS = ("near", "far")
#: names that expand to every registered detector that applies to a model
ALL_DETECTORS = "all"


class ExperimentError(InvalidInputError):
    """The experiment file is invalid; the message names the file, the field and the fix."""


# -- sources ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceSpec:
    """Where images come from: an image folder, an OpenOOD image list, digits or demo sets.

    TOML: ``{ folder = "dir" }`` (``dir/<class>/<image>``), ``{ list = "file.txt", root = "dir" }``
    (``relative/path label`` lines; label -1 = OOD), ``{ digits = [0, 1, 2] }`` (sklearn's
    digits), or ``{ demo = "id_test", seed = 0 }`` (a set of :mod:`oodbench.data.demo`).
    """

    kind: str  # folder | list | digits | demo
    path: Path | None = None
    root: Path | None = None
    classes: tuple[int, ...] | None = None
    demo: str | None = None
    seed: int = 0
    where: str = ""

    def build(self) -> Any:
        """The :class:`oodbench.data.Source` (checks that the files exist first)."""
        from oodbench import data

        self.check_exists()
        if self.kind == "folder":
            return data.ImageFolder(_given(self.path))
        if self.kind == "list":
            return data.ImageList(_given(self.path), _given(self.root))
        if self.kind == "demo":
            from oodbench.data.demo import demo_data

            return demo_data(seed=self.seed).source(str(self.demo))
        return data.DigitsSource(classes=list(self.classes) if self.classes is not None else None)

    def check_exists(self) -> None:
        """Raise ``MissingDataError`` saying what was expected where a path is missing."""
        if self.kind == "folder" and self.path is not None and not self.path.is_dir():
            raise MissingDataError(
                f"{self.where}: folder {self.path} does not exist; expected an image folder laid "
                "out as <folder>/<class name>/<image> (fix the path in the experiment file)"
            )
        if self.kind == "list":
            if self.path is not None and not self.path.is_file():
                raise MissingDataError(
                    f"{self.where}: image list {self.path} does not exist; expected a text file of "
                    "'relative/path label' lines (OpenOOD's benchmark_imglist format)"
                )
            if self.root is not None and not self.root.is_dir():
                raise MissingDataError(
                    f"{self.where}: root folder {self.root} does not exist; expected the folder "
                    "that the image list's relative paths start from"
                )

    def describe(self) -> dict[str, Any]:
        """A JSON-able description (part of cell keys and of the report's configuration)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.path is not None:
            out["path"] = str(self.path)
        if self.root is not None:
            out["root"] = str(self.root)
        if self.classes is not None:
            out["classes"] = list(self.classes)
        if self.demo is not None:
            out.update(demo=self.demo, seed=self.seed)
        return out


# -- models -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """A classifier: an ``oodbench.models.load`` spec, or a ``"module:callable"`` factory.

    TOML: ``{ spec = "timm:resnet50", pretrained = true, weights = "ckpt.safetensors" }`` or
    ``{ factory = "mypkg.nets:build", options = { width = 2 }, weights = "net.pt" }``; ``name``
    (the label in tables) defaults to the spec or factory.
    """

    name: str
    spec: str | None = None
    factory: str | None = None
    pretrained: bool = True
    weights: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> Any:
        """Build the :class:`~oodbench.models.classifier.Classifier` (on the CPU, eval mode).

        The extraction moves it to the experiment's device.
        """
        if self.spec is not None:
            from oodbench import models

            return models.load(self.spec, pretrained=self.pretrained, weights=self.weights)
        return self._load_factory()

    def _load_factory(self) -> Any:
        from oodbench.models.classifier import Classifier

        assert self.factory is not None
        module_name, _, attr = self.factory.partition(":")
        try:
            build = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ExperimentError(
                f"model {self.name!r}: cannot import factory {self.factory!r} ({err}); give it as "
                "'package.module:callable' importable from this Python environment"
            ) from None
        model = build(**dict(self.options))
        if not isinstance(model, Classifier):
            raise ExperimentError(
                f"model {self.name!r}: factory {self.factory!r} returned {type(model).__name__}, "
                "not an oodbench Classifier; wrap a plain nn.Module with oodbench.models.wrap"
            )
        if self.weights is not None:
            model.load_state_dict(load_state_dict(self.weights))
        return model.eval()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "pretrained": self.pretrained}
        if self.spec is not None:
            out["spec"] = self.spec
        if self.factory is not None:
            out["factory"] = self.factory
            out["options"] = dict(self.options)
        if self.weights is not None:
            out["weights"] = str(self.weights)
        return out


def load_state_dict(path: Path) -> dict[str, Any]:
    """Read a checkpoint safely: safetensors, or ``torch.load(weights_only=True)``."""
    if not path.is_file():
        raise MissingDataError(f"weights file {path} does not exist (fix 'weights' in the experiment)")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path)))
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    return dict(state)


# -- detectors ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class DetectorSpec:
    """A detector with fixed hyper-parameters and an optional grid (one cell per combination).

    TOML: ``"msp"``, ``{ name = "react", hyperparams = { percentile = 90 } }`` or
    ``{ name = "knn", grid = { k = [10, 50] } }``; the name ``"all"`` stands for every
    registered detector that applies to the model.
    """

    name: str
    hyperparams: Mapping[str, Any] = field(default_factory=dict)
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def configurations(self) -> list[dict[str, Any]]:
        """Every hyper-parameter setting this entry stands for (the grid's cartesian product)."""
        keys = sorted(self.grid)
        combos = itertools.product(*(self.grid[k] for k in keys))
        return [{**dict(self.hyperparams), **dict(zip(keys, values))} for values in combos]


# -- benchmarks ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CoodSpec:
    """The C-OOD severity benchmark (Galil et al., ICLR 2023) on an OOD class pool.

    Options mirror :class:`oodbench.benchmarks.cood.CoodBenchmark`; ``window`` defaults to the
    number of ID classes and ``n_levels`` to the paper's 11.
    """

    name: str
    pool: SourceSpec
    options: Mapping[str, Any] = field(default_factory=dict)
    type: str = "cood"

    def build(self, id_test: Any) -> Any:
        from oodbench.benchmarks.cood import CoodBenchmark

        bench = CoodBenchmark(id_test, self.pool.build(), **dict(self.options))
        bench.name = self.name
        return bench

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "pool": self.pool.describe(),
                "options": dict(self.options)}


@dataclass(frozen=True)
class StandardSpec:
    """A named benchmark from ``oodbench.benchmarks.get(name, **options)`` (it has its own ID set).

    ``options.root`` and the folders in ``options.paths`` are resolved against the experiment
    file's folder when relative.
    """

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    type: str = "standard"

    def build(self, id_test: Any) -> Any:
        from oodbench import benchmarks

        return benchmarks.get(self.name, **dict(self.options))

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "options": dict(self.options)}


@dataclass(frozen=True)
class GroupSpec:
    """One OOD group of a custom benchmark: its images and whether it is near or far OOD."""

    source: SourceSpec
    kind: str


@dataclass(frozen=True)
class CustomSpec:
    """The experiment's ID test set against OOD groups the user names (``name -> images``)."""

    name: str
    groups: Mapping[str, GroupSpec]
    type: str = "custom"

    def build(self, id_test: Any) -> Any:
        from oodbench.benchmarks.standard import OodSetsBenchmark

        ood = {g: spec.source.build() for g, spec in self.groups.items()}
        kinds = {g: spec.kind for g, spec in self.groups.items()}
        return OodSetsBenchmark(id_test, ood, kinds=kinds, name=self.name)

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name,
                "groups": {g: {**s.source.describe(), "kind": s.kind} for g, s in self.groups.items()}}


BenchmarkSpec = CoodSpec | StandardSpec | CustomSpec
#: the ``type`` values of ``[[benchmarks]]`` entries
BENCHMARK_TYPES = ("cood", "standard", "custom")


# -- the experiment -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Experiment:
    """A parsed experiment file (see the module docstring for the TOML layout)."""

    name: str
    output: Path
    models: tuple[ModelSpec, ...]
    detectors: tuple[DetectorSpec, ...]
    benchmarks: tuple[BenchmarkSpec, ...]
    id_test: SourceSpec | None = None
    id_fit: SourceSpec | None = None
    device: str = "auto"
    batch_size: int = 64
    num_workers: int | str = "auto"
    amp: str = "auto"
    file: Path | None = None
    text: str = ""

    @property
    def extract_options(self) -> dict[str, Any]:
        """Keyword arguments every ``extract`` call of this experiment gets."""
        return {"batch_size": self.batch_size, "device": self.device,
                "num_workers": self.num_workers, "amp": self.amp}

    def describe(self) -> dict[str, Any]:
        """The whole configuration as JSON-able data (for the report)."""
        return {
            "name": self.name,
            "output": str(self.output),
            "device": self.device,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "amp": self.amp,
            "models": [m.describe() for m in self.models],
            "id": {"test": self.id_test.describe() if self.id_test else None,
                   "fit": self.id_fit.describe() if self.id_fit else None},
            "benchmarks": [b.describe() for b in self.benchmarks],
            "detectors": [dataclasses.asdict(d) for d in self.detectors],
        }

    def to_json(self) -> str:
        return json.dumps(self.describe(), indent=2, sort_keys=True, default=str)


def load_experiment(path: str | Path, *, check_paths: bool = True) -> Experiment:
    """Read and validate an experiment TOML file.

    ``check_paths=False`` skips the checks that data folders, lists and weights exist (to
    validate a file written for another machine).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(
            f"experiment file {path} does not exist; pass the path of a TOML experiment file "
            "(see examples/experiment.toml)"
        )
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ExperimentError(f"{path}: not valid TOML: {err}") from None
    return parse_experiment(data, base_dir=path.resolve().parent, file=path, text=text,
                            check_paths=check_paths)


def parse_experiment(
    data: Mapping[str, Any],
    *,
    base_dir: str | Path = ".",
    file: str | Path | None = None,
    text: str = "",
    check_paths: bool = True,
) -> Experiment:
    """Validate an experiment given as a mapping (the parsed TOML); paths relative to ``base_dir``."""
    reader = _Reader(Path(base_dir), str(file) if file is not None else "experiment", check_paths)
    return reader.experiment(data, Path(file) if file is not None else None, text)


class _Reader:
    """Validates one experiment mapping; every error names ``file: field``."""

    def __init__(self, base_dir: Path, file: str, check_paths: bool):
        self.base_dir = base_dir
        self.file = file
        self.check_paths = check_paths

    # -- helpers ----------------------------------------------------------------------------
    def fail(self, where: str, message: str) -> ExperimentError:
        return ExperimentError(f"{self.file}: {where}: {message}")

    def table(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a table ({{ key = value }}), got {value!r}")
        return value

    def keys(self, table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise self.fail(
                    where, f"unknown key {key!r}; {hint}valid keys: {', '.join(allowed)}"
                )

    def entry(self, value: Any, where: str, key: str, allowed: Sequence[str]) -> Mapping[str, Any]:
        """A table with only ``allowed`` keys; a plain string is short for ``{ key = "..." }``."""
        table = self.table({key: value} if isinstance(value, str) else value, where)
        self.keys(table, allowed, where)
        return table

    def get(self, table: Mapping[str, Any], key: str, types: type | tuple[type, ...],
            where: str, default: Any = ..., what: str = "") -> Any:
        if key not in table:
            if default is ...:
                raise self.fail(where, f"missing required key {key!r}{' (' + what + ')' if what else ''}")
            return default
        value = table[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
            names = " or ".join(t.__name__ for t in _tuple(types))
            raise self.fail(f"{where}.{key}", f"expected {names}, got {value!r}")
        return value

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    # -- sections ---------------------------------------------------------------------------
    def experiment(self, data: Mapping[str, Any], file: Path | None, text: str) -> Experiment:
        self.keys(data, ["experiment", "models", "id", "benchmarks", "detectors"], "top level")
        head = self.table(data.get("experiment", {}), "[experiment]")
        self.keys(head, ["name", "output", "device", "batch_size", "num_workers", "amp"],
                  "[experiment]")
        default_name = file.stem if file is not None else "experiment"
        name = self.get(head, "name", str, "[experiment]", default_name)
        output = self.path(self.get(head, "output", str, "[experiment]", f"results/{name}"))
        batch_size = self.get(head, "batch_size", int, "[experiment]", 64)
        if batch_size < 1:
            raise self.fail("[experiment].batch_size", f"must be a positive integer, got {batch_size}")
        num_workers = self.get(head, "num_workers", (int, str), "[experiment]", "auto")
        if isinstance(num_workers, str) and num_workers != "auto":
            raise self.fail("[experiment].num_workers", f"use an integer or 'auto', got {num_workers!r}")
        amp = self.get(head, "amp", str, "[experiment]", "auto")
        if amp not in AMP_OPTIONS:
            raise self.fail("[experiment].amp", f"use one of {', '.join(AMP_OPTIONS)}, got {amp!r}")
        device = self.get(head, "device", str, "[experiment]", "auto")

        models = tuple(self.model(m, f"[[models]] #{i + 1}")
                       for i, m in enumerate(self.array(data, "models", "at least one model")))
        labels = [m.name for m in models]
        dupes = sorted({n for n in labels if labels.count(n) > 1})
        if dupes:
            raise self.fail("[[models]]", f"model name(s) {dupes} appear twice; give each a unique 'name'")

        id_section = self.table(data.get("id", {}), "[id]")
        self.keys(id_section, ["test", "fit"], "[id]")
        id_test = self.source(id_section["test"], "[id].test") if "test" in id_section else None
        id_fit = self.source(id_section["fit"], "[id].fit") if "fit" in id_section else None

        benchmarks = tuple(self.benchmark(b, f"[[benchmarks]] #{i + 1}")
                           for i, b in enumerate(self.array(data, "benchmarks", "at least one benchmark")))
        names = [b.name for b in benchmarks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise self.fail("[[benchmarks]]", f"benchmark name(s) {dupes} appear twice; set a unique 'name'")
        if id_test is None:
            needing = [b.name for b in benchmarks if b.type != "standard"]
            if needing:
                raise self.fail(
                    "[id]", f"benchmark(s) {needing} compare against the ID test set: add "
                    "[id] test = { folder = \"...\" } (or a list/root pair)"
                )
        detectors = tuple(self.detector(d, f"[[detectors]] #{i + 1}")
                          for i, d in enumerate(self.array(data, "detectors", "at least one detector")))
        return Experiment(
            name=name, output=output, models=models, detectors=detectors, benchmarks=benchmarks,
            id_test=id_test, id_fit=id_fit, device=device, batch_size=batch_size,
            num_workers=num_workers, amp=amp, file=file, text=text,
        )

    def array(self, data: Mapping[str, Any], key: str, what: str) -> list[Any]:
        value = data.get(key)
        if not value:
            raise self.fail(f"[[{key}]]", f"the experiment needs {what}; add a [[{key}]] entry")
        if not isinstance(value, list):
            raise self.fail(f"[[{key}]]", f"expected an array of entries, got {value!r}")
        return value

    def source(self, value: Any, where: str) -> SourceSpec:
        table = self.entry(value, where, "folder", ["folder", "list", "root", "digits", "demo", "seed"])
        kinds = [k for k in ("folder", "list", "digits", "demo") if k in table]
        if len(kinds) != 1:
            raise self.fail(
                where, "give exactly one of folder = \"dir\", list = \"file.txt\" (with root = "
                "\"dir\"), digits = [classes] or demo = \"id_test\""
            )
        kind = kinds[0]
        if "seed" in table and kind != "demo":
            raise self.fail(f"{where}.seed", "seed only goes with demo = \"...\"")
        if kind == "demo":
            from oodbench.data.demo import SOURCES
            from oodbench.errors import UnknownNameError

            name = self.get(table, "demo", str, where)
            seed = self.get(table, "seed", int, where, 0)
            if name not in SOURCES:
                raise self.fail(f"{where}.demo", str(UnknownNameError("demo source", name, SOURCES)))
            return SourceSpec("demo", demo=name, seed=seed, where=f"{self.file}: {where}")
        if kind == "digits":
            classes = self.get(table, "digits", list, where)
            if not all(isinstance(c, int) and 0 <= c <= 9 for c in classes):
                raise self.fail(f"{where}.digits", f"expected digit classes in 0-9, got {classes}")
            return SourceSpec("digits", classes=tuple(classes), where=f"{self.file}: {where}")
        path = self.path(self.get(table, kind, str, where))
        if "root" in table and kind != "list":
            raise self.fail(f"{where}.root", "root only goes with list = \"file.txt\"")
        root = self.path(self.get(table, "root", str, where)) if "root" in table else None
        if kind == "list" and root is None:
            root = path.parent
        spec = SourceSpec(kind, path=path, root=root, where=f"{self.file}: {where}")
        if self.check_paths:
            spec.check_exists()
        return spec

    def model(self, value: Any, where: str) -> ModelSpec:
        table = self.entry(
            value, where, "spec", ["name", "spec", "factory", "pretrained", "weights", "options"]
        )
        if ("spec" in table) == ("factory" in table):
            raise self.fail(
                where, "give exactly one of spec = \"timm:resnet50\" (see `oodbench list models`) "
                "or factory = \"package.module:callable\""
            )
        spec = self.get(table, "spec", str, where, None)
        factory = self.get(table, "factory", str, where, None)
        if factory is not None and ":" not in factory:
            raise self.fail(f"{where}.factory", f"expected 'package.module:callable', got {factory!r}")
        options = self.get(table, "options", Mapping, where, {})
        if spec is not None and options:
            raise self.fail(f"{where}.options", "options go with factory; a spec takes none")
        weights = self.get(table, "weights", str, where, None)
        weights_path = self.path(weights) if weights is not None else None
        if self.check_paths and weights_path is not None and not weights_path.is_file():
            raise MissingDataError(
                f"{self.file}: {where}.weights: {weights_path} does not exist; expected a "
                "checkpoint (.safetensors, or a torch state_dict .pt/.pth)"
            )
        return ModelSpec(
            name=self.get(table, "name", str, where, spec or factory),
            spec=spec, factory=factory, pretrained=self.get(table, "pretrained", bool, where, True),
            weights=weights_path, options=dict(options),
        )

    def detector(self, value: Any, where: str) -> DetectorSpec:
        table = self.entry(value, where, "name", ["name", "hyperparams", "grid"])
        name = self.get(table, "name", str, where, what="a registered detector, or \"all\"")
        hyperparams = dict(self.get(table, "hyperparams", Mapping, where, {}))
        grid_in = self.get(table, "grid", Mapping, where, {})
        grid: dict[str, tuple[Any, ...]] = {}
        for key, values in grid_in.items():
            if not isinstance(values, list) or not values:
                raise self.fail(f"{where}.grid.{key}", f"expected a non-empty array, got {values!r}")
            grid[key] = tuple(values)
        both = sorted(set(hyperparams) & set(grid))
        if both:
            raise self.fail(where, f"{both} appear in both hyperparams and grid; keep one")
        if name == ALL_DETECTORS:
            if hyperparams or grid:
                raise self.fail(where, "\"all\" takes no hyperparams or grid; list detectors by name")
            return DetectorSpec(name)
        spec = DetectorSpec(name, hyperparams, grid)
        self.check_detector(spec, where)
        return spec

    def check_detector(self, spec: DetectorSpec, where: str) -> None:
        from oodbench import detectors

        try:
            for config in spec.configurations():
                detectors.create(spec.name, **config)
        except OodbenchError as err:
            raise self.fail(where, str(err)) from None
        except (TypeError, ValueError) as err:
            raise self.fail(where, f"invalid hyper-parameters for {spec.name!r}: {err}") from None

    def benchmark(self, value: Any, where: str) -> BenchmarkSpec:
        table = self.table(value, where)
        kind = self.get(table, "type", str, where, what=f"one of {', '.join(BENCHMARK_TYPES)}")
        if kind == "cood":
            option_keys = ("window", "n_levels", "estimation_fraction", "images_per_class", "seed",
                           "selection", "id_classes")
            self.keys(table, ["type", "name", "pool", *option_keys], where)
            if "pool" not in table:
                raise self.fail(where, "missing required key 'pool' (the OOD class pool: a labelled "
                                "folder or image list of classes the model never saw)")
            options = {k: table[k] for k in option_keys if k in table}
            for key in ("window", "n_levels", "images_per_class", "seed"):
                if key in options:
                    self.get(table, key, int, where)
            if "selection" in options and options["selection"] not in ("percentiles", "disjoint"):
                raise self.fail(f"{where}.selection", "use \"percentiles\" (the paper) or \"disjoint\"")
            if "id_classes" in options and not (
                isinstance(options["id_classes"], list)
                and all(isinstance(c, int) and not isinstance(c, bool) for c in options["id_classes"])
            ):
                raise self.fail(f"{where}.id_classes", "expected an array of model class indices")
            if "estimation_fraction" in options:
                frac = self.get(table, "estimation_fraction", (float, int), where)
                if not 0 < frac < 1:
                    raise self.fail(f"{where}.estimation_fraction", f"must lie in (0, 1), got {frac}")
            return CoodSpec(self.get(table, "name", str, where, "cood"),
                            self.source(table["pool"], f"{where}.pool"), options)
        if kind == "standard":
            self.keys(table, ["type", "name", "options"], where)
            name = self.get(table, "name", str, where, what="a name from `oodbench list benchmarks`")
            self.check_standard(name, where)
            options = dict(self.get(table, "options", Mapping, where, {}))
            if isinstance(options.get("root"), str):  # data folders relative to this file
                options["root"] = str(self.path(options["root"]))
            if isinstance(options.get("paths"), Mapping):
                options["paths"] = {k: str(self.path(v)) if isinstance(v, str) else v
                                    for k, v in options["paths"].items()}
            return StandardSpec(name, options)
        if kind == "custom":
            self.keys(table, ["type", "name", "groups"], where)
            groups_in = self.table(self.get(table, "groups", Mapping, where), f"{where}.groups")
            if not groups_in:
                raise self.fail(f"{where}.groups", "add at least one OOD group: name = { folder = \"dir\", kind = \"far\" }")
            groups = {}
            for group, entry in groups_in.items():
                gwhere = f"{where}.groups.{group}"
                entry = dict(self.table(entry, gwhere))
                group_kind = entry.pop("kind", "far")
                if group_kind not in GROUP_KINDS:
                    raise self.fail(f"{gwhere}.kind", f"expected one of {GROUP_KINDS}, got {group_kind!r}")
                groups[group] = GroupSpec(self.source(entry, gwhere), group_kind)
            return CustomSpec(self.get(table, "name", str, where, "custom"), groups)
        raise self.fail(f"{where}.type", f"unknown benchmark type {kind!r}; use one of {', '.join(BENCHMARK_TYPES)}")

    def check_standard(self, name: str, where: str) -> None:
        from oodbench import benchmarks

        available = getattr(benchmarks, "available", None)
        if available is None:
            return
        valid = available()
        if name == "cood":
            raise self.fail(f"{where}", "the C-OOD benchmark is type = \"cood\" with a pool = {...}")
        if name not in valid:
            from oodbench.errors import UnknownNameError

            raise self.fail(f"{where}.name", str(UnknownNameError("benchmark", name, valid)))


def _given(path: Path | None) -> Path:
    assert path is not None, "folder and list sources always have their paths"
    return path


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)
