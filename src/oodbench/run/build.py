"""The one place where configuration specs become objects.

Specs (:class:`~oodbench.data.spec.SourceSpec`, :class:`~oodbench.models.spec.ModelSpec`,
benchmark entries of :mod:`oodbench.benchmarks.kinds`, :class:`~oodbench.tuning.spec.TuneSpec`,
:class:`~oodbench.train.config.TrainConfig`) hold data only; these functions build the
sources, classifiers and benchmarks they describe, run a tuning entry and a training config.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from oodbench import data, detectors, models
from oodbench.benchmarks.base import Benchmark
from oodbench.benchmarks.kinds import BenchmarkEntry, KindInputs, kind_of, with_intervals
from oodbench.config import cache_dir
from oodbench.data.demo import demo_data
from oodbench.data.download import file_digest
from oodbench.data.labels import apply_label_map
from oodbench.data.source import Source
from oodbench.data.spec import OodSourceSpec, SourceSpec
from oodbench.errors import ExperimentError
from oodbench.extract.activations import Activations
from oodbench.models.checkpoint import load_strict, read_state_dict
from oodbench.models.classifier import Classifier
from oodbench.models.spec import ModelSpec
from oodbench.train.config import TrainConfig, read_train_config
from oodbench.train.finetune import train
from oodbench.train.result import TrainResult
from oodbench.tuning import tune
from oodbench.tuning.result import TuneResult
from oodbench.tuning.spec import TuneSpec
from oodbench.tuning.split import split_by_class


# -- sources ------------------------------------------------------------------------------------
def build_source(spec: SourceSpec) -> Source:
    """The :class:`oodbench.data.Source` of a source entry (checks that the files exist first)."""
    spec.check_exists()
    names = spec.label_order()
    if isinstance(spec, OodSourceSpec) and spec.folder is not None and names is None \
            and spec.label_map is None:  # an OOD set: every image below the folder, unlabelled
        return data.OodFolder(spec.folder)
    if spec.folder is not None:
        if spec.label_map is not None:
            return apply_label_map(data.ImageFolder(spec.folder), spec.label_map)
        if names is not None:
            return data.ImageFolder(spec.folder, class_names=names)
        return data.open_folder(spec.folder)
    if spec.list_file is not None:
        root = spec.list_file.parent if spec.root is None else spec.root
        return data.ImageList(spec.list_file, root, class_names=names)
    if spec.demo is not None:
        return demo_data(seed=spec.seed or 0).source(spec.demo)
    return data.DigitsSource(classes=list(spec.digits) if spec.digits is not None else None)


# -- models -------------------------------------------------------------------------------------
def load_model(spec: ModelSpec) -> Classifier:
    """Build the classifier of a model entry (on the CPU, eval mode; the extraction moves it to
    the experiment's device)."""
    if spec.spec is not None:
        return models.load(spec.spec, pretrained=spec.pretrained, weights=spec.weights,
                           num_classes=spec.num_classes)
    if spec.train is not None:
        return run_training(spec.train).model
    return _load_factory(spec)


def _load_factory(spec: ModelSpec) -> Classifier:
    assert spec.factory is not None
    module_name, _, attr = spec.factory.partition(":")
    try:
        build = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ExperimentError(
            f"model {spec.name!r}: cannot import factory {spec.factory!r} ({err}); give it as "
            "'package.module:callable' importable from this Python environment"
        ) from None
    model = build(**dict(spec.options))
    if not isinstance(model, Classifier):
        raise ExperimentError(
            f"model {spec.name!r}: factory {spec.factory!r} returned {type(model).__name__}, "
            "not an oodbench Classifier; wrap a plain nn.Module with oodbench.models.wrap"
        )
    if spec.weights is not None:
        load_strict(model, read_state_dict(spec.weights), origin=repr(str(spec.weights)))
    return model.eval()


def describe_model(spec: ModelSpec) -> dict[str, Any]:
    """``spec.describe()`` plus, for a ``train = "..."`` model, its training config's content
    key (a changed config is a new model)."""
    out = spec.describe()
    if spec.train is not None:
        out["train_key"] = training_key(read_train_config(spec.train))
    return out


# -- training configs ---------------------------------------------------------------------------
def training_key(config: TrainConfig) -> str:
    """The digest that names a training run's cache folder: everything that decides the
    weights (model, its initial weights, the training and outlier images' fingerprints, loss,
    optimiser, seed, precision)."""
    model = {k: v for k, v in config.model.describe().items() if k != "name"}
    if config.model.weights is not None:
        model["weights_sha256"] = file_digest(config.model.weights, "sha256")
    settings = config.train.record()
    sources = {"train": build_source(config.data.train).fingerprint(),
               "outliers": None if config.data.outliers is None
               else build_source(config.data.outliers).fingerprint()}
    ident = json.dumps({"model": model, "train": settings, "data": sources}, sort_keys=True,
                       default=str)
    return hashlib.sha256(ident.encode()).hexdigest()[:20]


def training_output(config: TrainConfig) -> Path:
    """Where a training run writes (``[train].output``, else ``cache_dir()/train/<key>``)."""
    return config.train.output or cache_dir() / "train" / training_key(config)


def run_training(config: TrainConfig | str | Path, *, progress: bool = True) -> TrainResult:
    """Train (or load the finished run of) a config; returns the :class:`TrainResult`."""
    if not isinstance(config, TrainConfig):
        config = read_train_config(config)
    s = config.train
    return train(
        load_model(config.model), build_source(config.data.train), out=training_output(config),
        loss=s.loss, loss_options=s.loss_options, trainable=s.trainable, seed=s.seed,
        device=s.device, amp=s.resolved_amp(), num_workers=s.num_workers,
        outlier_batch_size=s.resolved_outlier_batch_size(),
        outliers=None if config.data.outliers is None else build_source(config.data.outliers),
        optim=s.optim(), progress=progress,
    )


# -- benchmarks ---------------------------------------------------------------------------------
def build_benchmark(entry: BenchmarkEntry, id_test: Source | None) -> Benchmark:
    """The benchmark of a ``[[benchmarks]]`` entry (by its registered kind), with the entry's
    interval options; ``id_test`` is the experiment's ID test source (kinds that need it)."""
    bench = kind_of(entry).build(entry, KindInputs(id_test=id_test, source=build_source))
    return with_intervals(bench, entry)


# -- tuning -------------------------------------------------------------------------------------
def run_tuning(spec: TuneSpec, detector: str, base: Mapping[str, Any], model: Any,
               fit: Activations, extract: Callable[[Source], Activations],
               id_val: Activations | None = None) -> TuneResult:
    """Tune ``detector`` (its other hyper-parameters fixed at ``base``) on ``fit`` (the model's
    ``[id].fit`` activations) as the entry says; ``extract(source)`` gives a source's
    activations. The ID validation rows: the entry's ``id_val``, else ``id_val`` (the model's
    ``[id].val`` activations), else one image per class of ``fit`` (the rest is fitted on); the
    tuning record says which (``id_val``), and names the entry's ``space`` (a table or
    ``"paper"``) and ``seed``."""
    if spec.id_val is not None:
        id_val, role = extract(build_source(spec.id_val)), "tune.id_val"
    elif id_val is not None:
        role = "[id].val"
    else:
        fit_rows, val_rows = split_by_class(fit.labels, spec.seed)
        fit, id_val = fit.subset(fit_rows), fit.subset(val_rows)
        role = f"one image per class of [id].fit (seed {spec.seed})"
    options: dict[str, Any] = {"criterion": spec.criterion, "protocol": spec.protocol,
                               "search": spec.search}
    if spec.search != "grid":
        options.update(n_trials=spec.n_trials, seed=spec.seed)
    if spec.given_settings or spec.protocol_class.table_keys():
        options["settings"] = spec.protocol_settings
    ood = extract(build_source(spec.ood)) if spec.ood is not None else None
    result = tune(detectors.create(detector, **base), spec.space, id_val, ood, fit=fit,
                  model=model, **options)
    result.provenance["id_val"] = role  # where the tuning's ID validation rows came from
    result.provenance.update(space=spec.space, seed=spec.seed)  # the entry's space and seed
    return result
