"""The grid of an experiment: one *cell* per (model, detector configuration, benchmark).

A cell's key is a digest of everything that determines its numbers (the model entry, the
detector's name, full hyper-parameters and preset, the benchmark's description and the ID
sources), so
re-running an experiment skips every cell whose key already has a finished result, and changing
any of those settings makes a new cell. Keys use the configured data paths, not the image
contents (after replacing images in place, write the results to a new output folder); a weights
file enters with its sha256, so retrained weights at the same path make new cells.

Cells are grouped per model (:class:`ModelPlan`): a model is loaded once and each (model,
source) pair is extracted once through the cache with the union of what the model's detectors
need (``capture``), so every detector reads the same cached pass.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oodbench import detectors
from oodbench.benchmarks.base import capture_for
from oodbench.benchmarks.kinds import BenchmarkEntry, kind_of
from oodbench.errors import ExperimentError, OodbenchError
from oodbench.models.fit_transforms import DEFAULT_FIT_TRANSFORM
from oodbench.models.spec import ModelSpec
from oodbench.params import Params, plain
from oodbench.run.detector_spec import ALL_DETECTORS
from oodbench.run.experiment import Experiment
from oodbench.tuning.paper_space import paper_space_names

if TYPE_CHECKING:
    from oodbench.detectors.base import Detector
    from oodbench.run.resolve import Resolved

#: detector inputs every classifier provides (text embeddings only CLIP models do)
_CLASSIFIER_INPUTS = frozenset({"logits", "features", "feature_map", "head", "train", "model"})


@dataclass(frozen=True)
class DetectorConfig:
    """A detector configuration as the plan fixed it, once: its name, every hyper-parameter
    (defaults and preset values filled in), the preset it started from, the tuning entry, and
    what the detector declares, read from the one detector the plan built (``prototype``,
    unfitted; :meth:`create` hands out copies of it, so ``detectors.create`` runs once per
    configuration and run)."""

    name: str
    hyperparams: Params  # every hyper-parameter (defaults filled in)
    preset: str = ""  # the preset the configuration started from ("" = none)
    tune: Params = Params()  # the entry's ``tune`` table (empty = not tuned)
    requires: frozenset[str] = frozenset()
    fit_data: str = "none"
    fits_on_data: bool = False
    prototype: Detector | None = field(default=None, compare=False, hash=False, repr=False)

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any], preset: str,
           tune: Mapping[str, Any] | None = None) -> DetectorConfig:
        """The configuration of ``create(name, preset=preset, **params)``: that one call."""
        det = detectors.create(name, preset=preset or None, **params)
        return cls(name, Params(det.hyperparams), preset, Params(tune or {}),
                   frozenset(det.requires), str(det.fit_data), bool(det.fits_on_data), det)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.hyperparams)

    def describe(self) -> dict[str, Any]:
        """What of this configuration enters a cell key: name and every hyper-parameter (JSON
        types), the ``tune`` table's canonical text and the preset, when there are."""
        ident: dict[str, Any] = {"detector": self.name, "hyperparams": plain(self.hyperparams)}
        if self.tune:  # (as the keys have always held it: its canonical text)
            ident["tune"] = self.tune.text
        if self.preset:
            ident["preset"] = self.preset
        return ident

    def fits_on(self, role: str) -> bool:
        """Whether the detector fits on ``role`` data (``"train"`` or ``"id_val"``)."""
        return self.fits_on_data and self.fit_data == role

    def create(self) -> Detector:
        """A new (unfitted) detector of this configuration: a copy of the one the plan built."""
        if self.prototype is None:
            return detectors.create(self.name, preset=self.preset or None, **self.params)
        return copy.deepcopy(self.prototype)


@dataclass(frozen=True)
class Cell:
    """One (model, detector configuration, benchmark) result."""

    model: ModelSpec
    config: DetectorConfig
    benchmark: BenchmarkEntry
    key: str
    #: the transform ``[id].fit`` is read with (``[id] fit_transform``; "eval": the model's own)
    fit_transform: str = DEFAULT_FIT_TRANSFORM

    @property
    def detector(self) -> str:
        return self.config.name

    @property
    def hyperparams(self) -> Params:
        return self.config.hyperparams

    @property
    def tune(self) -> Params:
        return self.config.tune

    @property
    def preset(self) -> str:
        return self.config.preset

    @property
    def params(self) -> dict[str, Any]:
        return self.config.params

    @property
    def fit_transform_used(self) -> str:
        """The transform of the data the detector fits on, as the results record it: ``[id]
        fit_transform`` for a detector fitted on ``[id].fit`` (every tuned one is), ``"eval"``
        for one fitted on ``id_val``, ``""`` for one that fits on no data."""
        if self.config.fits_on("train") or self.tune:
            return self.fit_transform
        return DEFAULT_FIT_TRANSFORM if self.config.fits_on("id_val") else ""

    def label(self) -> str:
        """``model · benchmark · <configuration label>`` for the plan, logs and progress
        (:func:`oodbench.detectors.label.configuration_label`: every hyper-parameter, the
        search space of those tuning will choose, preset, fit data and tuning protocol)."""
        from oodbench.detectors.label import configuration_label

        params = self.params
        tune = self.tune
        space = tune.get("space")
        if isinstance(space, str):  # a named space ("paper"): its dimensions, by name
            space = {name: f"the {space!r} space" for name in paper_space_names(self.detector)}
        fit_data = str(params.get("fit_data", ""))
        if self.fit_transform_used not in ("", DEFAULT_FIT_TRANSFORM):
            fit_data += f" read with {self.fit_transform_used}"
        config = configuration_label(
            self.detector, params, preset=self.preset, fit_data=fit_data,
            tuned_by=str(tune.get("protocol", "")), to_tune=space)
        return f"{self.model.name} · {self.benchmark.name} · {config}"


@dataclass(frozen=True)
class ModelPlan:
    """The cells of one model, and what its single extraction per source must capture."""

    model: ModelSpec
    cells: tuple[Cell, ...]
    capture: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """Every cell of an experiment, grouped by model (models in file order)."""

    experiment: Experiment
    models: tuple[ModelPlan, ...]

    @property
    def cells(self) -> list[Cell]:
        return [c for m in self.models for c in m.cells]

    def pending(self, finished: set[str]) -> Plan:
        """The plan without the cells whose key is in ``finished`` (models left empty dropped)."""
        models = []
        for m in self.models:
            cells = tuple(c for c in m.cells if c.key not in finished)
            if cells:
                models.append(replace(m, cells=cells))
        return replace(self, models=tuple(models))

    def summary(self) -> str:
        """One line: how many models, detector configurations, benchmarks and cells."""
        cells = self.cells
        configs = {(c.detector, c.hyperparams) for c in cells}
        benches = {c.benchmark.name for c in cells}
        return (f"{len(self.models)} model(s) x {len(configs)} detector configuration(s) x "
                f"{len(benches)} benchmark(s) = {len(cells)} cell(s)")


def detector_configurations(experiment: Experiment) -> list[DetectorConfig]:
    """Every untuned detector configuration of the experiment, ``"all"`` expanded, each built
    once (``detectors.create``: which checks its values).

    ``"all"`` stands for every registered detector (with the entry's preset: every detector that
    preset configures), except those that need CLIP text embeddings when no model is a CLIP
    model, those that need a group-softmax head (``mos``: name it) and those another entry of
    the file names (``"all"`` plus ``{ name = "knn", hyperparams = { k = 5 } }`` runs knn with
    k = 5 only); the runner records the remaining ones that do not apply to a given model as
    ``skipped`` with the reason. Two entries that come to the same configuration run it once.
    """
    any_clip = any((m.spec or "").startswith("clip:") for m in experiment.models)
    runnable = _CLASSIFIER_INPUTS | ({"text_embeddings"} if any_clip else set())
    out: list[DetectorConfig] = []
    asked: set[tuple[str, str, str]] = set()  # (name, given hyper-parameters, preset)
    seen: set[tuple[str, str, str]] = set()  # (name, every hyper-parameter, preset)
    named = {spec.name for spec in experiment.detectors if spec.name != ALL_DETECTORS}
    for index, (spec, preset) in enumerate(zip(experiment.detectors, experiment.detector_presets)):
        if spec.tune is not None:
            continue  # tuned entries: see tuned_detectors
        if spec.name == ALL_DETECTORS:
            entries: list[tuple[str, Mapping[str, Any]]] = [
                (row["name"], {}) for row in detectors.available()
                if set(row["requires"]) <= runnable and (not preset or preset in row["presets"])
                and row["name"] not in named]
        else:
            entries = [(spec.name, config) for config in spec.settings]
        for name, config in entries:
            given = (name, canonical_json(dict(config)), preset)
            if given in asked:
                continue
            asked.add(given)
            built = _configuration(experiment, index, name, config, preset)
            key = (name, built.hyperparams.text, preset)
            if key not in seen:
                seen.add(key)
                out.append(built)
    return out


def tuned_detectors(experiment: Experiment) -> list[DetectorConfig]:
    """The configuration of every tuned entry: its full fixed hyper-parameters, preset and
    ``tune`` table (the rest is chosen at run time)."""
    return [_configuration(experiment, index, spec.name, spec.hyperparams, preset, spec.tune_record)
            for index, (spec, preset) in enumerate(zip(experiment.detectors,
                                                       experiment.detector_presets))
            if spec.tune is not None]


def _configuration(experiment: Experiment, index: int, name: str, params: Mapping[str, Any],
                   preset: str, tune: Params | None = None) -> DetectorConfig:
    """:meth:`DetectorConfig.of`, its errors as ``ExperimentError`` naming the file and entry."""
    try:
        return DetectorConfig.of(name, params, preset, tune)
    except OodbenchError as err:
        message = str(err)
    except (TypeError, ValueError) as err:
        message = f"invalid hyper-parameters for {name!r}: {err}"
    file = experiment.file or "experiment"
    raise ExperimentError(f"{file}: [[detectors]] #{index + 1}: {message}")


def make_plan(experiment: Experiment, resolved: Resolved | None = None) -> Plan:
    """Expand the experiment into cells (models x detector configurations x benchmarks).

    Planning reads no file: what a cell key needs from the disk (a weights file's digest, a
    training config's key) comes from ``resolved`` (:func:`oodbench.run.resolve.resolve`; made
    here when not given). It reads the values the experiment froze on validation (each entry's
    settings, tune record and preset), builds each detector configuration once, and decides
    one capture for every model's extractions."""
    configs = detector_configurations(experiment) + tuned_detectors(experiment)
    id_sources: dict[str, Any] = {
        "test": experiment.id_test.describe() if experiment.id_test else None,
        "fit": experiment.id_fit.describe() if experiment.id_fit else None,
    }
    if experiment.id_val is not None:  # (keys of experiments without [id] val stay as they were)
        id_sources["val"] = experiment.id_val.describe()
    if experiment.fit_transform != DEFAULT_FIT_TRANSFORM:  # (as [id] val: default keys unchanged)
        _check_fit_transform_used(experiment, configs)
        id_sources["fit_transform"] = experiment.fit_transform
    if resolved is None:
        from oodbench.run.resolve import resolve

        resolved = resolve(experiment)
    capture = capture_for(configs)
    needs = {n for d in experiment.detectors if d.tune is not None
             for n in d.tune.protocol_class.needs}
    needs |= {n for b in experiment.benchmarks for n in kind_of(b).needs}
    if "features" in needs:  # e.g. held-out variants' heads train on features
        capture = tuple(sorted({*capture, "features"}))
    models = []
    for model in experiment.models:
        ident = {"model": resolved.models[model.name], "id": id_sources}
        cells = [Cell(model, config, bench, cell_key({**ident, **config.describe(),
                                                      "benchmark": bench.describe()}),
                      experiment.fit_transform)
                 for bench in experiment.benchmarks for config in configs]
        models.append(ModelPlan(model, tuple(cells), capture))
    return Plan(experiment, tuple(models))


def _check_fit_transform_used(experiment: Experiment, configs: list[DetectorConfig]) -> None:
    """``[id] fit_transform`` other than "eval" needs a detector that reads ``[id].fit`` (one
    that fits on ``train``, or a tuned one); else an ``ExperimentError`` naming the fix."""
    if any(c.fits_on("train") or c.tune for c in configs):
        return
    fits = sorted({f"{c.name} ({c.fit_data})" for c in configs})
    raise ExperimentError(
        f"{experiment.file or 'experiment'}: [id] fit_transform = "
        f"{experiment.fit_transform!r} changes how [id].fit is read, but no detector fits on "
        f"[id].fit (fit data of the detectors: {', '.join(fits) or 'none'}); remove "
        "fit_transform, or add a detector that fits on the ID training set")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys: the text a cell key is the digest of."""
    return json.dumps(value, sort_keys=True, default=str)


def cell_key(ident: Mapping[str, Any]) -> str:
    """The key of the cell ``ident`` describes: the digest of its :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:20]
