"""Experiment files: what to run, as TOML, validated into frozen pydantic models.

An experiment lists models, the ID sources, benchmarks and detectors; the planner
(:mod:`oodbench.run.plan`) turns it into cells. Relative paths are resolved against the folder
of the TOML file. A complete, commented example is ``examples/experiment.toml``::

    [experiment]
    name = "resnets"
    output = "results/resnets"      # results.parquet, scores/, report.html go here
    device = "auto"                 # "cpu", "cuda", "cuda:1", "auto"
    batch_size = 64
    protocol = "openood"            # detector presets: "paper", "openood", "cood", "cood_code"

    [[models]]
    spec = "timm:resnet50"          # anything oodbench.models.load accepts

    [id]
    test = { folder = "/data/imagenet/val" }      # ImageFolder: <root>/<class>/<image>
    fit = { list = "train.txt", root = "/data/imagenet/train" }   # for KNN, ViM, ...
    val = { folder = "/data/imagenet/holdout" }   # held-out ID data: temperature scaling, ...

    [[benchmarks]]
    type = "cood"                   # C-OOD severity benchmark (Galil et al., ICLR 2023)
    pool = { list = "in21k_pool.txt", root = "/data/imagenet21k" }
    n_bootstrap = 1000              # FPR@95 / AUPR intervals (any benchmark; AUROC: DeLong)

    [[detectors]]
    name = "knn"
    grid = { k = [10, 50, 100] }    # one cell per value
    protocol = "paper"              # this detector's preset (overrides [experiment].protocol)

``protocol`` starts every detector from that protocol's preset (its hyper-parameters and the ID
data it fits on, see :mod:`oodbench.detectors.presets`); ``hyperparams`` and ``grid`` override
its values, and ``protocol = ""`` on a detector keeps the class defaults. With a protocol,
``"all"`` stands for the detectors that protocol configures. Detectors fit on ``[id] fit`` or
``[id] val`` as their ``fit_data`` says.

The schema is the pydantic models below (one mechanism for every config file:
:mod:`oodbench.schema`). Every mistake raises :class:`ExperimentError` naming the file, the
field and the fix; a missing data path raises ``MissingDataError`` saying what was expected.
"""

from __future__ import annotations

import importlib
import itertools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from oodbench.errors import ConfigError, MissingDataError, OodbenchError, UnknownNameError
from oodbench.schema import (
    At,
    ConfigPath,
    NonEmptyArray,
    Schema,
    context_of,
    parse,
    read_toml,
)

#: values of ``[experiment].amp`` (see ``oodbench.extract``)
AMP_OPTIONS = ("auto", "off", "bf16", "fp16")
#: kinds of OOD group a custom benchmark may declare
GROUP_KINDS = ("near", "far")
#: names that expand to every registered detector that applies to a model
ALL_DETECTORS = "all"


class ExperimentError(ConfigError):
    """The experiment file is invalid; the message names the file, the field and the fix."""


# -- sources ------------------------------------------------------------------------------------
class SourceSpec(Schema):
    """Where images come from: an image folder, an OpenOOD image list, digits or demo sets.

    TOML: ``{ folder = "dir" }`` (``dir/<class>/<image>``; or images in ``dir`` or ``dir/images``
    with ``dir/labels.txt``; or ImageNet validation images with their labels: see
    :func:`oodbench.data.open_folder`), ``{ list = "file.txt", root = "dir" }`` (``relative/path
    label`` lines; label -1 = OOD; ``root`` defaults to the list's folder), ``{ digits = [0, 1,
    2] }`` (sklearn's digits), or ``{ demo = "id_test", seed = 0 }`` (a set of
    :mod:`oodbench.data.demo`).

    Labels that index the model's classes: class folders named by the model's classes (ImageNet
    wnids or class names) are mapped onto them by ``extract``; otherwise a folder or list takes
    ``class_names = ["n01440764", ...]`` (or a text file, one name per line: the label order,
    label ``i`` is ``class_names[i]``, also mapped onto the model's classes by name), and a
    folder takes ``label_map = { my_cats = 281, my_dogs = 207 }`` (folder -> model class index).
    """

    shorthand = "folder"

    folder: ConfigPath | None = None
    list_file: ConfigPath | None = Field(None, alias="list")
    root: ConfigPath | None = None
    digits: tuple[StrictInt, ...] | None = None
    demo: StrictStr | None = None
    seed: StrictInt | None = None
    class_names: tuple[StrictStr, ...] | ConfigPath | None = Field(
        None, description="the label order: an array of class names or a file of one per line")
    label_map: dict[StrictStr, StrictInt] | None = Field(
        None, description="class folder -> model class index")

    _where: str = PrivateAttr(default="")

    @field_validator("class_names", mode="before")
    @classmethod
    def _names_or_file(cls, value: Any) -> Any:
        if value is None or isinstance(value, (str, Path)):
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError(
            f"expected an array of class names or the path of a file of them, got {value!r}")

    @model_validator(mode="after")
    def _one_layout(self) -> SourceSpec:
        given = [k for k in ("folder", "list", "digits", "demo") if self._raw(k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of folder = \"dir\", list = \"file.txt\" (with root = \"dir\"), "
                "digits = [classes] or demo = \"id_test\""
            )
        if self.seed is not None and self.layout != "demo":
            raise ValueError("seed only goes with demo = \"...\"")
        if self.root is not None and self.layout != "list":
            raise ValueError("root only goes with list = \"file.txt\"")
        if self.class_names is not None and self.layout not in ("folder", "list"):
            raise ValueError("class_names only goes with folder = \"dir\" or list = \"file.txt\"")
        if self.label_map is not None:
            if self.layout != "folder" or self.class_names is not None:
                raise ValueError("label_map goes with folder = \"dir\" and without class_names")
            negative = {k: v for k, v in self.label_map.items() if v < 0}
            if negative:
                raise ValueError(f"label_map: model class indices are >= 0; got {negative}")
        if self.digits is not None and not all(0 <= c <= 9 for c in self.digits):
            raise ValueError(f"digits: expected digit classes in 0-9, got {list(self.digits)}")
        if self.demo is not None:
            from oodbench.data.demo import SOURCES

            if self.demo not in SOURCES:
                raise ValueError(str(UnknownNameError("demo source", self.demo, SOURCES)))
        return self

    def _raw(self, key: str) -> Any:
        return self.list_file if key == "list" else getattr(self, key)

    @property
    def layout(self) -> str:
        """``folder``, ``list``, ``digits`` or ``demo``."""
        return next(k for k in ("folder", "list", "digits", "demo") if self._raw(k) is not None)

    @property
    def path(self) -> Path | None:
        """The folder or the image-list file (``None`` for digits and demo sets)."""
        return self.folder if self.folder is not None else self.list_file

    @property
    def list_root(self) -> Path | None:
        """The folder an image list's paths are relative to (default: the list's folder)."""
        if self.list_file is None:
            return None
        return self.root if self.root is not None else self.list_file.parent

    @property
    def where(self) -> str:
        """``file: [section].key`` of this source in its experiment (for error messages)."""
        return self._where

    def locate(self, where: str) -> SourceSpec:
        """Record where this source stands in its file (``Experiment`` does it on parsing)."""
        self._where = where
        return self

    def build(self) -> Any:
        """The :class:`oodbench.data.Source` (checks that the files exist first)."""
        from oodbench import data

        self.check_exists()
        names = self.label_order()
        if self.folder is not None:
            if self.label_map is not None:
                from oodbench.data.labels import apply_label_map

                return apply_label_map(data.ImageFolder(self.folder), self.label_map)
            if names is not None:
                return data.ImageFolder(self.folder, class_names=names)
            return data.open_folder(self.folder)
        if self.list_file is not None:
            root = self.list_file.parent if self.root is None else self.root
            return data.ImageList(self.list_file, root, class_names=names)
        if self.demo is not None:
            from oodbench.data.demo import demo_data

            return demo_data(seed=self.seed or 0).source(self.demo)
        return data.DigitsSource(classes=list(self.digits) if self.digits is not None else None)

    def label_order(self) -> list[str] | None:
        """``class_names`` as a list (read from its file when it is one), or ``None``."""
        if self.class_names is None or isinstance(self.class_names, tuple):
            return None if self.class_names is None else list(self.class_names)
        lines = self.class_names.read_text(encoding="utf-8").splitlines()
        return [line.strip() for line in lines if line.strip()]

    def check_exists(self) -> None:
        """Raise ``MissingDataError`` saying what was expected where a path is missing."""
        if self.folder is not None and not self.folder.is_dir():
            raise MissingDataError(
                f"{self.where}: folder {self.folder} does not exist; expected an image folder laid "
                "out as <folder>/<class name>/<image> (fix the path in that file)"
            )
        if isinstance(self.class_names, Path) and not self.class_names.is_file():
            raise MissingDataError(
                f"{self.where}: class_names file {self.class_names} does not exist; expected a "
                "text file with one class name per line (line i names label i)"
            )
        if self.list_file is not None:
            if not self.list_file.is_file():
                raise MissingDataError(
                    f"{self.where}: image list {self.list_file} does not exist; expected a text "
                    "file of 'relative/path label' lines (OpenOOD's benchmark_imglist format)"
                )
            root = self.list_root
            if root is not None and not root.is_dir():
                raise MissingDataError(
                    f"{self.where}: root folder {root} does not exist; expected the folder "
                    "that the image list's relative paths start from"
                )

    def describe(self) -> dict[str, Any]:
        """A JSON-able description (part of cell keys and of the report's configuration)."""
        out: dict[str, Any] = {"kind": self.layout}
        if self.path is not None:
            out["path"] = str(self.path)
        if self.list_root is not None:
            out["root"] = str(self.list_root)
        if self.digits is not None:
            out["classes"] = list(self.digits)
        if self.demo is not None:
            out.update(demo=self.demo, seed=self.seed or 0)
        if self.class_names is not None:
            out["class_names"] = (str(self.class_names) if isinstance(self.class_names, Path)
                                  else list(self.class_names))
        if self.label_map is not None:
            out["label_map"] = dict(self.label_map)
        return out


class OodSourceSpec(SourceSpec):
    """Images that are OOD, whose labels do not matter: a ``folder`` is every image below it,
    flat or in sub-folders (:class:`oodbench.data.OodFolder`, label -1); lists, digits and demo
    sets as for any source."""

    def build(self) -> Any:
        if self.folder is not None and self.class_names is None and self.label_map is None:
            from oodbench.data import OodFolder

            self.check_exists()
            return OodFolder(self.folder)
        return super().build()

    def check_exists(self) -> None:
        if self.folder is not None and not self.folder.is_dir():
            raise MissingDataError(
                f"{self.where}: folder {self.folder} does not exist; expected a folder of OOD "
                "images (flat, or in sub-folders) (fix the path in that file)"
            )
        super().check_exists()


# -- models -------------------------------------------------------------------------------------
class ModelSpec(Schema):
    """A classifier: an ``oodbench.models.load`` spec, or a ``"module:callable"`` factory.

    TOML: ``{ spec = "timm:resnet50", pretrained = true, weights = "ckpt.safetensors" }``
    (``num_classes`` for a head of another size), ``{ factory = "mypkg.nets:build", options =
    { width = 2 }, weights = "net.pt" }``, or ``{ train = "train.toml" }``: the model a training
    config produces (:mod:`oodbench.train.config`; trained once, cached by content). ``name``
    (the label in tables) defaults to the spec, factory or training config.
    """

    shorthand = "spec"

    name: StrictStr = ""
    spec: StrictStr | None = None
    factory: StrictStr | None = None
    train: ConfigPath | None = None
    pretrained: StrictBool = True
    weights: ConfigPath | None = None
    num_classes: StrictInt | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        label = data.get("spec") or data.get("factory") or data.get("train")
        if not data.get("name") and isinstance(label, str):
            data["name"] = label
        return data

    @model_validator(mode="after")
    def _spec_or_factory(self) -> ModelSpec:
        if [self.spec, self.factory, self.train].count(None) != 2:
            raise ValueError(
                "give exactly one of spec = \"timm:resnet50\" (see `oodbench list models`), "
                "factory = \"package.module:callable\" or train = \"train.toml\""
            )
        if self.spec is None and self.num_classes is not None:
            raise ValueError("num_classes goes with spec; a factory takes it in options")
        if self.spec is not None and self.options:
            raise ValueError("options go with factory; a spec takes none")
        if self.train is not None and (self.weights is not None or self.options):
            raise ValueError("a train = \"...\" model takes its weights and options from the "
                             "training config; remove weights / options here")
        return self

    @field_validator("factory")
    @classmethod
    def _importable_form(cls, factory: str | None) -> str | None:
        if factory is not None and ":" not in factory:
            raise ValueError(f"expected 'package.module:callable', got {factory!r}")
        return factory

    def load(self) -> Any:
        """Build the :class:`~oodbench.models.classifier.Classifier` (on the CPU, eval mode).

        The extraction moves it to the experiment's device.
        """
        if self.spec is not None:
            from oodbench import models

            return models.load(self.spec, pretrained=self.pretrained, weights=self.weights,
                               num_classes=self.num_classes)
        if self.train is not None:
            from oodbench.train.config import run_training

            return run_training(self.train).model
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
            from oodbench.models.checkpoint import load_strict, read_state_dict

            load_strict(model, read_state_dict(self.weights), origin=repr(str(self.weights)))
        return model.eval()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "pretrained": self.pretrained}
        if self.spec is not None:
            out["spec"] = self.spec
        if self.factory is not None:
            out["factory"] = self.factory
            out["options"] = dict(self.options)
        if self.num_classes is not None:
            out["num_classes"] = self.num_classes
        if self.train is not None:  # the content key: a changed config is a new model
            from oodbench.train.config import read_train_config

            out["train"] = str(self.train)
            out["train_key"] = read_train_config(self.train).content_key()
        if self.weights is not None:
            out["weights"] = str(self.weights)
        return out


# -- detectors ----------------------------------------------------------------------------------
#: tune keys that only the held-out-class protocol takes
_HELD_OUT_KEYS = ("n_variants", "held_out_fraction", "retrain", "train")


class TuneSpec(Schema):
    """``tune = {...}`` of a ``[[detectors]]`` entry: its hyper-parameters are chosen at run time
    by :func:`oodbench.tune` (one cell, with the chosen values and how they were chosen in the
    results' ``hyperparams`` and ``tuning`` columns).

    TOML: ``tune = { protocol = "held_out_classes", space = { percentile = [85, 90, 95] } }``
    (no OOD data: ID classes of ``[id].fit`` are withheld) or ``tune = { protocol = "ood_val",
    ood = "data/ood_val", search = "tpe", n_trials = 40, space = { slope = { low = 0.0,
    high = 5.0 } } }`` (integer bounds make an integer range).
    The ID validation images of the tuning: ``id_val`` (a source) when given, else the
    experiment's ``[id] val``, else one image of every ``[id].fit`` class that has two or more,
    the rest of ``[id].fit`` being what the detector fits on while tuning
    (``oodbench.tune.split.split_by_class`` with ``seed``). Held-out options: ``n_variants``,
    ``held_out_fraction``, ``retrain`` (``"head"`` or ``"full"``), ``train`` (the trainer's
    options, e.g. ``{ epochs = 30 }``).
    """

    protocol: Literal["ood_val", "held_out_classes"] = Field(
        description="\"ood_val\" (with ood = ...) or \"held_out_classes\""
    )
    space: dict[str, Any] = Field(
        description="the hyper-parameters to search: name = [values] or { low = ..., high = ... }"
    )
    search: Literal["grid", "tpe"] = "grid"
    criterion: StrictStr | None = None
    n_trials: StrictInt = 50
    seed: StrictInt = 0
    ood: OodSourceSpec | None = None
    id_val: SourceSpec | None = None
    n_variants: StrictInt | None = None
    held_out_fraction: StrictFloat | None = None
    retrain: StrictStr | None = None
    train: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TuneSpec:
        from oodbench.tune.held_out import HeldOutClasses
        from oodbench.tune.space import parse_space

        if self.protocol == "ood_val" and self.ood is None:
            raise ValueError("protocol = \"ood_val\" needs ood = { folder = \"...\" } (the OOD "
                             "validation images)")
        if self.protocol == "held_out_classes":
            if self.ood is not None:
                raise ValueError("protocol = \"held_out_classes\" uses no OOD data; drop ood")
            try:
                HeldOutClasses(**self.held_out)
            except OodbenchError as err:
                raise ValueError(str(err)) from None
        else:
            given = [k for k in _HELD_OUT_KEYS if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{given} only go with protocol = \"held_out_classes\"")
        try:
            parse_space(self.space, allow_ranges=self.search == "tpe")
        except OodbenchError as err:
            raise ValueError(str(err)) from None
        return self

    @property
    def held_out(self) -> dict[str, Any]:
        """The ``held_out`` settings of ``oodbench.tune`` given in the file."""
        out = {k: getattr(self, k) for k in _HELD_OUT_KEYS if getattr(self, k) is not None}
        return {**out, "seed": self.seed}

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        for key in ("ood", "id_val"):
            spec = getattr(self, key)
            if spec is not None:
                yield f"{where}.tune.{key}", spec

    def run(self, detector: str, base: Mapping[str, Any], model: Any, fit: Any,
            extract: Any, id_val: Any = None) -> Any:
        """Tune ``detector`` (its other hyper-parameters fixed at ``base``) on ``fit`` (the
        model's ``[id].fit`` activations) and ``id_val`` (the model's ``[id].val`` activations,
        ``None`` without one); ``extract(source)`` gives a source's activations.
        Returns the :class:`oodbench.tune.TuneResult`."""
        from oodbench import detectors
        from oodbench.tune import tune
        from oodbench.tune.split import split_by_class

        if self.id_val is not None:
            id_val, role = extract(self.id_val.build()), "tune.id_val"
        elif id_val is not None:
            role = "[id].val"
        else:
            fit_rows, val_rows = split_by_class(fit.labels, self.seed)
            fit, id_val = fit.subset(fit_rows), fit.subset(val_rows)
            role = f"one image per class of [id].fit (seed {self.seed})"
        options: dict[str, Any] = {"criterion": self.criterion, "protocol": self.protocol,
                                   "search": self.search}
        if self.search == "tpe":
            options.update(n_trials=self.n_trials, seed=self.seed)
        if self.protocol == "held_out_classes":
            options["held_out"] = self.held_out
        ood = extract(self.ood.build()) if self.ood is not None else None
        result = tune(detectors.create(detector, **base), self.space, id_val, ood, fit=fit,
                      model=model, **options)
        result.provenance["id_val"] = role  # where the tuning's ID validation rows came from
        return result

    def describe(self) -> dict[str, Any]:
        out = {k: v for k, v in self.model_dump(exclude={"ood", "id_val"}).items() if v is not None}
        out.update({k: getattr(self, k).describe() for k in ("ood", "id_val")
                    if getattr(self, k) is not None})
        return out


class DetectorSpec(Schema):
    """A detector with fixed hyper-parameters and an optional grid (one cell per combination).

    TOML: ``"msp"``, ``{ name = "react", hyperparams = { percentile = 90 } }`` or
    ``{ name = "knn", grid = { k = [10, 50] } }``; the name ``"all"`` stands for every
    registered detector that applies to the model. ``tune = {...}`` (:class:`TuneSpec`) chooses
    the hyper-parameters of its ``space`` at run time instead of a grid.
    """

    shorthand = "name"

    name: StrictStr = Field(description="a registered detector, or \"all\"")
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, NonEmptyArray] = Field(default_factory=dict)
    tune: TuneSpec | None = None
    protocol: StrictStr | None = Field(
        None, description="a preset (\"paper\", \"openood\", \"cood\", \"cood_code\"); \"\" = none")

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str | None) -> str | None:
        return _check_protocol(value)

    @model_validator(mode="after")
    def _valid_configurations(self) -> DetectorSpec:
        both = sorted(set(self.hyperparams) & set(self.grid))
        if both:
            raise ValueError(f"{both} appear in both hyperparams and grid; keep one")
        if self.name == ALL_DETECTORS:
            if self.hyperparams or self.grid or self.tune:
                raise ValueError("\"all\" takes no hyperparams, grid or tune; list detectors by name")
            return self
        self.check(self.protocol)
        return self

    def check(self, protocol: str | None) -> None:
        """Raise ``ValueError`` unless every configuration builds under ``protocol``."""
        from oodbench import detectors

        try:
            for config in self.configurations():
                detectors.create(self.name, preset=protocol or None, **config)
            if self.tune is not None:
                self._check_tune()
        except OodbenchError as err:
            raise ValueError(str(err)) from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"invalid hyper-parameters for {self.name!r}: {err}") from None

    def preset(self, default: str | None) -> str | None:
        """The preset this entry's detectors start from: its own ``protocol`` (``""``: none),
        else the experiment's."""
        chosen = default if self.protocol is None else self.protocol
        return chosen or None

    def _check_tune(self) -> None:
        from oodbench.tune.space import detector_builder, grid_points, parse_space

        assert self.tune is not None
        if self.grid:
            raise ValueError("tune searches its own space; give either grid or tune, not both")
        both = sorted(set(self.hyperparams) & set(self.tune.space))
        if both:
            raise ValueError(f"{both} appear in both hyperparams and tune.space; keep one")
        dims = parse_space(self.tune.space, allow_ranges=self.tune.search == "tpe")
        build = detector_builder(self.name, list(dims), self.tune.protocol)
        lists = {k: v for k, v in dims.items() if isinstance(v, list)}
        for point in grid_points(lists):  # every listed value is valid
            build({**self.hyperparams, **point})

    def configurations(self) -> list[dict[str, Any]]:
        """Every hyper-parameter setting this entry stands for (the grid's cartesian product;
        a tuned entry stands for its fixed ``hyperparams``, the rest is chosen at run time)."""
        keys = sorted(self.grid)
        combos = itertools.product(*(self.grid[k] for k in keys))
        return [{**dict(self.hyperparams), **dict(zip(keys, values))} for values in combos]

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "hyperparams": dict(self.hyperparams),
               "grid": {k: list(v) for k, v in self.grid.items()}}
        if self.tune is not None:
            out["tune"] = self.tune.describe()
        if self.protocol is not None:
            out["protocol"] = self.protocol
        return out


def _check_protocol(value: str | None) -> str | None:
    """``value`` when it is a known protocol, ``""`` or ``None``; else a ``ValueError``."""
    from oodbench.detectors.presets import protocols

    if value and value not in protocols():
        raise ValueError(str(UnknownNameError("protocol", value, protocols())))
    return value


# -- benchmarks ---------------------------------------------------------------------------------
class IntervalOptions(Schema):
    """Confidence intervals on every row of a benchmark (any ``type``).

    ``ci``: DeLong's 95 % interval of AUROC (cheap, on by default); ``n_bootstrap``: that many
    seeded bootstrap replicates for FPR@95 and AUPR intervals (0 = off; it costs about
    ``n_bootstrap`` times the metric, see benchmarks/bench_ci.py).
    """

    ci: StrictBool = True
    n_bootstrap: StrictInt = 0

    @field_validator("n_bootstrap")
    @classmethod
    def _replicates(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be 0 (off) or a number of replicates such as 1000; got {value}")
        return value

    def with_intervals(self, bench: Any) -> Any:
        """``bench`` with this entry's interval options set."""
        bench.ci, bench.n_bootstrap = self.ci, self.n_bootstrap
        return bench

    def intervals(self) -> dict[str, Any]:
        """The options for ``describe`` (and so the cell keys), only when not the defaults."""
        if self.ci and not self.n_bootstrap:
            return {}
        return {"intervals": {"ci": self.ci, "n_bootstrap": self.n_bootstrap}}


_COOD_OPTIONS = ("window", "n_levels", "estimation_fraction", "images_per_class", "seed",
                 "selection", "id_classes")


class CoodSpec(IntervalOptions):
    """The C-OOD severity benchmark (Galil et al., ICLR 2023) on an OOD class pool.

    Options mirror :class:`oodbench.benchmarks.cood.CoodBenchmark`; ``window`` defaults to the
    number of ID classes and ``n_levels`` to the paper's 11.
    """

    type: Literal["cood"] = "cood"
    name: StrictStr = "cood"
    pool: SourceSpec = Field(
        description="the OOD class pool: a labelled folder or image list of classes the model "
        "never saw"
    )
    window: StrictInt | None = None
    n_levels: StrictInt | None = None
    estimation_fraction: StrictFloat | None = None
    images_per_class: StrictInt | None = None
    seed: StrictInt | None = None
    selection: StrictStr | None = None
    id_classes: tuple[StrictInt, ...] | None = None

    @field_validator("estimation_fraction")
    @classmethod
    def _fraction(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < 1:
            raise ValueError(f"must lie in (0, 1), got {value}")
        return value

    @field_validator("selection")
    @classmethod
    def _selection(cls, value: str | None) -> str | None:
        if value is not None and value not in ("percentiles", "disjoint"):
            raise ValueError("use \"percentiles\" (the paper) or \"disjoint\"")
        return value

    @field_validator("id_classes", mode="before")
    @classmethod
    def _id_classes(cls, value: Any) -> Any:
        if value is not None and not (
            isinstance(value, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in value)
        ):
            raise ValueError("expected an array of model class indices")
        return value

    @property
    def options(self) -> dict[str, Any]:
        """The options given in the file (keyword arguments of ``CoodBenchmark``)."""
        out = {k: getattr(self, k) for k in _COOD_OPTIONS if getattr(self, k) is not None}
        if "id_classes" in out:
            out["id_classes"] = list(out["id_classes"])
        return out

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        yield f"{where}.pool", self.pool

    def build(self, id_test: Any) -> Any:
        from oodbench.benchmarks.cood import CoodBenchmark

        bench = CoodBenchmark(id_test, self.pool.build(), **self.options)
        bench.name = self.name
        return self.with_intervals(bench)

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "pool": self.pool.describe(),
                "options": self.options, **self.intervals()}


class StandardSpec(IntervalOptions):
    """A named benchmark from ``oodbench.benchmarks.get(name, **options)`` (it has its own ID set).

    ``options.root`` and the folders in ``options.paths`` are resolved against the experiment
    file's folder when relative.
    """

    type: Literal["standard"] = "standard"
    name: StrictStr = Field(description="a name from `oodbench list benchmarks`")
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        from oodbench import benchmarks

        if name == "cood":
            raise ValueError("the C-OOD benchmark is type = \"cood\" with a pool = {...}")
        valid = benchmarks.available()
        if name not in valid:
            raise ValueError(str(UnknownNameError("benchmark", name, valid)))
        return name

    @field_validator("options")
    @classmethod
    def _resolve_paths(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        base = Path(context_of(info).get("base_dir", Path.cwd()))

        def resolve(value: str) -> str:
            path = Path(value).expanduser()
            return str(path if path.is_absolute() else (base / path).resolve())

        options = dict(options)
        if isinstance(options.get("root"), str):  # data folders relative to this file
            options["root"] = resolve(options["root"])
        if isinstance(options.get("paths"), Mapping):
            options["paths"] = {k: resolve(v) if isinstance(v, str) else v
                                for k, v in options["paths"].items()}
        return options

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        return iter(())

    def build(self, id_test: Any) -> Any:
        from oodbench import benchmarks

        return self.with_intervals(benchmarks.get(self.name, **dict(self.options)))

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "options": dict(self.options),
                **self.intervals()}


class GroupSpec(OodSourceSpec):
    """One OOD group of a custom benchmark: its images (a folder: every image below it, flat or
    in sub-folders) and whether it is near or far OOD."""

    kind: StrictStr = "far"

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value not in GROUP_KINDS:
            raise ValueError(f"expected one of {GROUP_KINDS}, got {value!r}")
        return value

    @property
    def source(self) -> SourceSpec:
        return self


class CustomSpec(IntervalOptions):
    """The experiment's ID test set against OOD groups the user names (``name -> images``)."""

    type: Literal["custom"] = "custom"
    name: StrictStr = "custom"
    groups: dict[str, GroupSpec] = Field(
        description="OOD groups: name = { folder = \"dir\", kind = \"far\" }"
    )

    @field_validator("groups")
    @classmethod
    def _some(cls, groups: dict[str, GroupSpec]) -> dict[str, GroupSpec]:
        if not groups:
            raise ValueError("add at least one OOD group: name = { folder = \"dir\", kind = \"far\" }")
        return groups

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        for group, spec in self.groups.items():
            yield f"{where}.groups.{group}", spec

    def build(self, id_test: Any) -> Any:
        from oodbench.benchmarks.standard import OodSetsBenchmark

        ood = {g: spec.build() for g, spec in self.groups.items()}
        kinds = {g: spec.kind for g, spec in self.groups.items()}
        return self.with_intervals(OodSetsBenchmark(id_test, ood, kinds=kinds, name=self.name))

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name,
                "groups": {g: {**s.describe(), "kind": s.kind} for g, s in self.groups.items()},
                **self.intervals()}


#: the ``type`` values of ``[[benchmarks]]`` entries
BENCHMARK_TYPES = ("cood", "standard", "custom")


def benchmark_type(entry: Any) -> str | None:
    """The union tag of a ``[[benchmarks]]`` entry (its ``type``)."""
    if isinstance(entry, (CoodSpec, StandardSpec, CustomSpec)):
        return f"type={entry.type}"
    kind = entry.get("type") if isinstance(entry, Mapping) else None
    if kind is None:
        return None
    return f"type={kind}" if kind in BENCHMARK_TYPES else str(kind)


BenchmarkSpec = Annotated[
    Annotated[CoodSpec, Tag("type=cood")]
    | Annotated[StandardSpec, Tag("type=standard")]
    | Annotated[CustomSpec, Tag("type=custom")],
    Discriminator(benchmark_type),
]


# -- the experiment -----------------------------------------------------------------------------
class Settings(Schema):
    """``[experiment]``: name, output folder and how extraction runs."""

    name: StrictStr = "experiment"
    output: ConfigPath = Path("results/experiment")
    device: StrictStr = "auto"
    batch_size: StrictInt = 64
    num_workers: StrictInt | StrictStr = "auto"
    amp: StrictStr = "auto"
    protocol: StrictStr | None = Field(
        None, description="the preset every detector starts from (\"paper\", \"openood\", \"cood\", "
        "\"cood_code\"); a detector's own protocol overrides it")

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str | None) -> str | None:
        return _check_protocol(value)

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        data.setdefault("name", context_of(info).get("default_name", "experiment"))
        if isinstance(data["name"], str):
            data.setdefault("output", f"results/{data['name']}")
        return data

    @field_validator("batch_size")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be a positive integer, got {value}")
        return value

    @field_validator("num_workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        if isinstance(value, bool) or not (isinstance(value, int) or value == "auto"):
            raise ValueError(f"use an integer or 'auto', got {value!r}")
        return value

    @field_validator("amp")
    @classmethod
    def _amp(cls, value: str) -> str:
        if value not in AMP_OPTIONS:
            raise ValueError(f"use one of {', '.join(AMP_OPTIONS)}, got {value!r}")
        return value


class IdSources(Schema):
    """``[id]``: the ID test set, the ID training images detectors fit statistics on (``fit``),
    and held-out ID validation images for the detectors that fit on those (``val``)."""

    test: SourceSpec | None = None
    fit: SourceSpec | None = None
    val: SourceSpec | None = None


class Experiment(Schema):
    """A parsed experiment file (see the module docstring for the TOML layout).

    The ``[experiment]`` settings are also attributes of the experiment itself
    (``exp.output``, ``exp.batch_size``, ``exp.protocol``, ...); ``id_test`` / ``id_fit`` /
    ``id_val`` are ``[id]``'s sources.
    """

    experiment: Settings = Field(default_factory=dict, validate_default=True)  # type: ignore[arg-type]
    models: tuple[ModelSpec, ...] = Field((), validate_default=True)
    id: IdSources = Field(default_factory=dict, validate_default=True)  # type: ignore[arg-type]
    benchmarks: tuple[BenchmarkSpec, ...] = Field((), validate_default=True)
    detectors: tuple[DetectorSpec, ...] = Field((), validate_default=True)

    _file: Path | None = PrivateAttr(default=None)
    _text: str = PrivateAttr(default="")

    @field_validator("models", "benchmarks", "detectors", mode="before")
    @classmethod
    def _nonempty(cls, value: Any, info: ValidationInfo) -> Any:
        what = {"models": "at least one model", "benchmarks": "at least one benchmark",
                "detectors": "at least one detector"}[str(info.field_name)]
        if not value:
            raise ValueError(f"the experiment needs {what}; add a [[{info.field_name}]] entry")
        if not isinstance(value, list):
            raise ValueError(f"expected an array of entries, got {value!r}")
        return value

    @field_validator("models", "benchmarks")
    @classmethod
    def _unique_names(cls, value: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        names = [entry.name for entry in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            what = "model" if info.field_name == "models" else "benchmark"
            fix = "give each a unique 'name'" if what == "model" else "set a unique 'name'"
            raise ValueError(f"{what} name(s) {dupes} appear twice; {fix}")
        return value

    @model_validator(mode="after")
    def _detectors_under_the_protocol(self) -> Experiment:
        for i, spec in enumerate(self.detectors):
            if spec.name != ALL_DETECTORS and spec.protocol is None and self.protocol:
                try:
                    spec.check(self.protocol)
                except ValueError as err:
                    raise At(f"[[detectors]] #{i + 1}", f"{err} (protocol {self.protocol!r} comes "
                             "from [experiment]; set protocol = \"\" on this detector to use its "
                             "defaults)") from None
        return self

    @model_validator(mode="after")
    def _id_fit_when_tuning(self) -> Experiment:
        tuned = [d.name for d in self.detectors if d.tune is not None]
        if tuned and self.id.fit is None:
            raise At("[id]", f"detector(s) {tuned} are tuned on the ID training set: add "
                     "[id] fit = { folder = \"...\" }")
        return self

    @model_validator(mode="after")
    def _id_test_when_needed(self) -> Experiment:
        needing = [b.name for b in self.benchmarks if b.type != "standard"]
        if self.id.test is None and needing:
            raise At("[id]", f"benchmark(s) {needing} compare against the ID test set: add "
                     "[id] test = { folder = \"...\" } (or a list/root pair)")
        return self

    # -- the [experiment] settings, flattened ----------------------------------------------
    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def output(self) -> Path:
        return self.experiment.output

    @property
    def device(self) -> str:
        return self.experiment.device

    @property
    def batch_size(self) -> int:
        return self.experiment.batch_size

    @property
    def num_workers(self) -> int | str:
        return self.experiment.num_workers

    @property
    def amp(self) -> str:
        return self.experiment.amp

    @property
    def protocol(self) -> str | None:
        return self.experiment.protocol

    @property
    def id_test(self) -> SourceSpec | None:
        return self.id.test

    @property
    def id_fit(self) -> SourceSpec | None:
        return self.id.fit

    @property
    def id_val(self) -> SourceSpec | None:
        return self.id.val

    @property
    def file(self) -> Path | None:
        """The TOML file this experiment was read from (``None`` for a mapping)."""
        return self._file

    @property
    def text(self) -> str:
        """The TOML file's text (kept next to the results)."""
        return self._text

    @property
    def extract_options(self) -> dict[str, Any]:
        """Keyword arguments every ``extract`` call of this experiment gets."""
        return {"batch_size": self.batch_size, "device": self.device,
                "num_workers": self.num_workers, "amp": self.amp}

    def sources(self) -> Iterator[tuple[str, SourceSpec]]:
        """Every image source with where it stands in the file (``[id].test``, ...)."""
        for key, spec in (("test", self.id.test), ("fit", self.id.fit), ("val", self.id.val)):
            if spec is not None:
                yield f"[id].{key}", spec
        for i, bench in enumerate(self.benchmarks):
            yield from bench.sources(f"[[benchmarks]] #{i + 1}")
        for i, det in enumerate(self.detectors):
            if det.tune is not None:
                yield from det.tune.sources(f"[[detectors]] #{i + 1}")

    def check_paths(self) -> None:
        """Raise one ``MissingDataError`` naming every data path and weights file that is
        missing (each with what was expected there)."""
        missing: list[str] = []
        for spec in (s for _, s in self.sources()):
            try:
                spec.check_exists()
            except MissingDataError as err:
                missing.append(str(err))
        for i, model in enumerate(self.models):
            if model.weights is not None and not model.weights.is_file():
                missing.append(
                    f"{self._file or 'experiment'}: [[models]] #{i + 1}.weights: {model.weights} "
                    "does not exist; expected a checkpoint (.safetensors, or a torch state_dict "
                    ".pt/.pth)"
                )
        if len(missing) == 1:
            raise MissingDataError(missing[0])
        if missing:
            listed = "\n".join(f"  - {m}" for m in missing)
            raise MissingDataError(f"{len(missing)} paths of the experiment do not exist:\n{listed}")

    def describe(self) -> dict[str, Any]:
        """The whole configuration as JSON-able data (for the report)."""
        return {
            "name": self.name,
            "output": str(self.output),
            "device": self.device,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "amp": self.amp,
            "protocol": self.protocol,
            "models": [m.describe() for m in self.models],
            "id": {"test": self.id_test.describe() if self.id_test else None,
                   "fit": self.id_fit.describe() if self.id_fit else None,
                   "val": self.id_val.describe() if self.id_val else None},
            "benchmarks": [b.describe() for b in self.benchmarks],
            "detectors": [d.describe() for d in self.detectors],
        }

    def to_json(self) -> str:
        return json.dumps(self.describe(), indent=2, sort_keys=True, default=str)


def load_experiment(path: str | Path, *, check_paths: bool = True) -> Experiment:
    """Read and validate an experiment TOML file.

    ``check_paths=False`` skips the checks that data folders, lists and weights exist (to
    validate a file written for another machine).
    """
    path = Path(path)
    data, text = read_toml(path, what="experiment file", example="examples/experiment.toml",
                           error=ExperimentError)
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
    label = str(file) if file is not None else "experiment"
    context = {"base_dir": Path(base_dir).resolve(),
               "default_name": Path(file).stem if file is not None else "experiment"}
    exp = parse(Experiment, data, file=label, error=ExperimentError, context=context)
    exp._file, exp._text = (Path(file) if file is not None else None), text
    for where, spec in exp.sources():
        spec.locate(f"{label}: {where}")
    if check_paths:
        exp.check_paths()
    return exp
