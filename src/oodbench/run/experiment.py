"""Experiment files: what to run, as TOML, validated into frozen pydantic models.

An experiment lists models, the ID sources, benchmarks and detectors; the planner
(:mod:`oodbench.run.plan`) turns it into cells. Relative paths are resolved against the folder
of the TOML file. A complete, commented example is ``examples/experiment.toml``::

    [experiment]
    name = "resnets"
    output = "results/resnets"      # results/, scores/, report.html go here
    device = "auto"                 # "cpu", "cuda", "cuda:1", "auto"
    batch_size = 64
    preset = "openood"              # detector presets: "paper", "openood", "cood", "cood_code"

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
    preset = "paper"                # this detector's preset (overrides [experiment].preset)

``preset`` starts every detector from that published protocol's configuration (its
hyper-parameters and the ID data it fits on, see :mod:`oodbench.detectors.presets`);
``hyperparams`` and ``grid`` override its values, and ``preset = ""`` on a detector keeps the
class defaults. With a preset, ``"all"`` stands for the detectors that preset configures.
Detectors fit on ``[id] fit`` or ``[id] val`` as their ``fit_data`` says; ``[id] fit_transform``
names the transform ``[id] fit`` is read with (``"eval"``, the model's own, by default;
``"mood_train"``: MOOD's training augmentation, as its official ID statistics are extracted; see
:mod:`oodbench.models.fit_transforms`). ``protocol`` is the
deprecated name of ``preset`` (still read, with a ``DeprecatedKeyWarning``); "protocol" now
means a tuning protocol only (``tune = { protocol = ... }``).

The schema is the pydantic models of each domain (one mechanism for every config file:
:mod:`oodbench.schema`): sources (:mod:`oodbench.data.spec`), models
(:mod:`oodbench.models.spec`), benchmark entries (:mod:`oodbench.benchmarks.kinds`, one
registered kind per ``type``), detector entries (:mod:`oodbench.run.detector_spec`) and their
tuning (:mod:`oodbench.tuning.spec`); this module holds the ``[experiment]`` and ``[id]`` tables
and the file as a whole. Every mistake raises :class:`ExperimentError` naming the file, the
field and the fix; a missing data path raises ``MissingDataError`` saying what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from oodbench.benchmarks.kinds import KINDS, AnyBenchmarkEntry, BenchmarkEntry
from oodbench.benchmarks.kinds.cood import CoodSpec
from oodbench.benchmarks.kinds.custom import CustomSpec, GroupSpec
from oodbench.benchmarks.kinds.standard import StandardSpec
from oodbench.data.spec import SourceSpec
from oodbench.errors import ExperimentError, MissingDataError, UnknownNameError
from oodbench.models.fit_transforms import DEFAULT_FIT_TRANSFORM, check_fit_transform
from oodbench.models.spec import ModelSpec
from oodbench.run.detector_spec import ALL_DETECTORS, DetectorSpec, check_preset, renamed_key
from oodbench.schema import At, ConfigPath, Schema, context_of, load, parse
from oodbench.tuning.spec import TuneSpec

__all__ = [
    "ALL_DETECTORS", "AMP_OPTIONS", "BenchmarkSpec", "CoodSpec", "CustomSpec", "DetectorSpec",
    "Experiment", "ExperimentError", "GroupSpec", "IdSources", "ModelSpec", "Settings",
    "SourceSpec", "StandardSpec", "TuneSpec", "load_experiment", "parse_experiment",
]

#: values of ``[experiment].amp`` (see ``oodbench.extract``)
AMP_OPTIONS = ("auto", "off", "bf16", "fp16")

#: a ``[[benchmarks]]`` entry: validated by the schema of its registered kind (``type``)
BenchmarkSpec = Annotated[BenchmarkEntry, AnyBenchmarkEntry]


# -- the experiment -----------------------------------------------------------------------------
class Settings(Schema):
    """``[experiment]``: name, output folder and how extraction runs."""

    name: StrictStr = "experiment"
    output: ConfigPath = Path("results/experiment")
    device: StrictStr = "auto"
    batch_size: StrictInt = 64
    num_workers: StrictInt | StrictStr = "auto"
    amp: StrictStr = "auto"
    preset: StrictStr | None = Field(
        None, description="the preset every detector starts from (\"paper\", \"openood\", \"cood\", "
        "\"cood_code\"); a detector's own preset overrides it")

    _preset_key: str = PrivateAttr(default="preset")

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        return check_preset(value)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_preset_key(cls, data: Any, handler: Any) -> Settings:
        used = "protocol" if isinstance(data, Mapping) and "protocol" in data else "preset"
        settings: Settings = handler(data)
        settings._preset_key = used
        return settings

    @property
    def preset_key(self) -> str:
        """The key the file named the preset with (``protocol``: its deprecated name)."""
        return self._preset_key

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        renamed_key(data, info, "[experiment]")
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
    and held-out ID validation images for the detectors that fit on those (``val``).

    ``fit_transform`` names the transform ``fit`` is read with (:mod:`oodbench.models.fit_transforms`):
    ``"eval"`` (default), the model's own evaluation transform, or a published protocol's
    training augmentation (``"mood_train"``: MOOD's ID statistics)."""

    test: SourceSpec | None = None
    fit: SourceSpec | None = None
    val: SourceSpec | None = None
    fit_transform: StrictStr = Field(
        DEFAULT_FIT_TRANSFORM, description="the transform [id].fit is read with: \"eval\" (the "
        "model's own) or a named training augmentation (oodbench.models.fit_transforms)")

    @field_validator("fit_transform")
    @classmethod
    def _known_fit_transform(cls, value: str) -> str:
        try:
            return check_fit_transform(value)
        except UnknownNameError as err:
            raise ValueError(str(err)) from None

    @model_validator(mode="after")
    def _fit_transform_needs_fit(self) -> IdSources:
        if self.fit_transform != DEFAULT_FIT_TRANSFORM and self.fit is None:
            raise ValueError(f"fit_transform = {self.fit_transform!r} names how [id].fit is "
                             "read, but there is no [id] fit: add fit = { folder = \"...\" } "
                             "or leave fit_transform out")
        return self


class Experiment(Schema):
    """A parsed experiment file (see the module docstring for the TOML layout).

    The ``[experiment]`` settings are also attributes of the experiment itself
    (``exp.output``, ``exp.batch_size``, ``exp.preset``, ...); ``id_test`` / ``id_fit`` /
    ``id_val`` are ``[id]``'s sources.
    """

    experiment: Settings = Field(default_factory=dict, validate_default=True)
    models: tuple[ModelSpec, ...] = Field((), validate_default=True)
    id: IdSources = Field(default_factory=dict, validate_default=True)
    benchmarks: tuple[BenchmarkSpec, ...] = Field((), validate_default=True)
    detectors: tuple[DetectorSpec, ...] = Field((), validate_default=True)

    _file: Path | None = PrivateAttr(default=None)
    _text: str = PrivateAttr(default="")
    _detector_presets: tuple[str, ...] = PrivateAttr(default=())

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
    def _detectors_under_the_preset(self) -> Experiment:
        """Check each detector under the preset it starts from, and freeze those presets."""
        key = self.experiment.preset_key
        for i, spec in enumerate(self.detectors):
            if spec.name != ALL_DETECTORS and spec.preset is None and self.preset:
                try:
                    spec.check(self.preset)
                except ValueError as err:
                    raise At(f"[[detectors]] #{i + 1}", f"{err} ({key} {self.preset!r} comes "
                             f"from [experiment]; set {key} = \"\" on this detector to use its "
                             "defaults)") from None
        self._detector_presets = tuple(spec.chosen_preset(self.preset) or ""
                                       for spec in self.detectors)
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
        sections = {"id_test": ("test", "compare against the ID test set"),
                    "fit": ("fit", "need the ID training set"),
                    "id_val": ("val", "need held-out ID validation images")}
        for need, (key, what) in sections.items():
            needing = [b.name for b in self.benchmarks if need in KINDS[b.type].needs]
            if needing and getattr(self.id, key) is None:
                raise At("[id]", f"benchmark(s) {needing} {what}: add [id] {key} = "
                         "{ folder = \"...\" } (or a list/root pair)")
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
    def preset(self) -> str | None:
        return self.experiment.preset

    @property
    def protocol(self) -> str | None:
        """Deprecated name of :attr:`preset`."""
        return self.experiment.preset

    @property
    def detector_presets(self) -> tuple[str, ...]:
        """The preset each ``[[detectors]]`` entry starts from (its own ``preset``, else
        ``[experiment]``'s; ``""``: none), in file order, frozen on validation."""
        return self._detector_presets

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
    def fit_transform(self) -> str:
        """The name of the transform ``[id].fit`` is read with (``"eval"``: the model's own)."""
        return self.id.fit_transform

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
        """The whole configuration as JSON-able data (for the report; a ``train = "..."``
        model's training key reads its config and fingerprints its images)."""
        from oodbench.run.build import describe_model

        return {
            "name": self.name,
            "output": str(self.output),
            "device": self.device,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "amp": self.amp,
            "preset": self.preset,
            "models": [describe_model(m) for m in self.models],
            "id": {"test": self.id_test.describe() if self.id_test else None,
                   "fit": self.id_fit.describe() if self.id_fit else None,
                   "val": self.id_val.describe() if self.id_val else None,
                   "fit_transform": self.fit_transform},
            "benchmarks": [b.describe() for b in self.benchmarks],
            "detectors": [d.describe() for d in self.detectors],
        }

    def to_json(self) -> str:
        return json.dumps(self.describe(), indent=2, sort_keys=True, default=str)

    def configuration_files(self) -> dict[str, str]:
        """The files that keep this experiment next to its results, name -> text:
        ``experiment.json`` (:meth:`describe`) and, when it was read from one, the TOML file's
        text as ``experiment.toml``."""
        files = {"experiment.json": self.to_json() + "\n"}
        if self.text:
            files["experiment.toml"] = self.text
        return files


def load_experiment(source: str | Path | Mapping[str, Any], *, check_paths: bool = True
                    ) -> Experiment:
    """Read and validate an experiment TOML file, in one call of :func:`oodbench.schema.load`
    (``source``: its path); a mapping with the file's structure is validated as
    :func:`parse_experiment` does, its relative paths against the current folder.

    ``check_paths=False`` skips the checks that data folders, lists and weights exist (to
    validate a file written for another machine).
    """
    if isinstance(source, Mapping):
        return parse_experiment(source, base_dir=Path.cwd(), check_paths=check_paths)
    source = Path(source)
    exp, text = load(Experiment, source, what="experiment file",
                     example="examples/experiment.toml", error=ExperimentError,
                     context=_context(source.resolve().parent, source))
    return _placed(exp, source, text, check_paths)


def parse_experiment(
    data: Mapping[str, Any],
    *,
    base_dir: str | Path = ".",
    file: str | Path | None = None,
    text: str = "",
    check_paths: bool = True,
) -> Experiment:
    """Validate an experiment given as a mapping (the parsed TOML); paths relative to ``base_dir``."""
    context = _context(base_dir, file)
    exp = parse(Experiment, data, file=context["file"], error=ExperimentError, context=context)
    return _placed(exp, file, text, check_paths)


def _context(base_dir: str | Path, file: str | Path | None) -> dict[str, Any]:
    """The validation context of an experiment: where its relative paths start, the file's name
    (messages), and the default ``[experiment] name`` (the file's stem)."""
    return {"base_dir": Path(base_dir).resolve(), "file": _label(file),
            "default_name": Path(file).stem if file is not None else "experiment"}


def _label(file: str | Path | None) -> str:
    return str(file) if file is not None else "experiment"


def _placed(exp: Experiment, file: str | Path | None, text: str, check_paths: bool) -> Experiment:
    """``exp`` with its file and text kept, each source told where it stands in the file, and
    (``check_paths``) every data path and weights file checked to exist."""
    exp._file, exp._text = (Path(file) if file is not None else None), text
    for where, spec in exp.sources():
        spec.locate(f"{_label(file)}: {where}")
    if check_paths:
        exp.check_paths()
    return exp
