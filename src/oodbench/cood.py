"""One call from a model to its C-OOD severity curve: ``oodbench.cood.benchmark``.

The counterpart of the official code's entry point (github.com/mdabbah/COOD_benchmarking,
``benchmark_model_on_cood_with_severities(model, confidence_function='softmax', ...,
num_severity_levels=11, levels_to_benchmark='all', batch_size=64, ...)``), on oodbench's
cached, one-pass machinery:

    from oodbench import cood
    from oodbench.results import paper

    table = cood.benchmark("timm:resnet50", ["softmax", "max_logit"],
                           id_test="imagenet/val", pool="imagenet21k_pool/")
    paper.rank(paper.load(), table)                       # among the published models
    paper.plot_among_published(paper.load(), table, detector="msp")

The model may be given as the official code takes it: a spec string (``"timm:resnet50"``,
``"efficientnet_lite0"``; see ``oodbench.models.describe_specs()``), a ``Classifier``, a plain
``nn.Module`` with ``transforms=`` (its last ``nn.Linear`` is taken as the head), or the
official dict form ``{"model_name": ..., "model": ..., "transforms": ...}`` (``model`` may be
absent: the name is then loaded as a spec). Detectors are oodbench detector names, the
paper's confidence function names (``softmax``, ``max_logit``, ``entropy``, ``odin``,
``mcd_entropy``), or ``Detector`` objects. Extraction goes through the activation cache, so a
second call, or another detector, costs no forward pass.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from torch import nn

from oodbench.benchmarks.base import hyperparams_json
from oodbench.data.source import Source
from oodbench.detectors.base import Detector
from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.extract.activations import Activations
from oodbench.models.classifier import Classifier

ModelInput = str | Classifier | nn.Module | Mapping[str, Any]
DataInput = Source | Activations | str | os.PathLike
DetectorInput = str | Detector
#: the official dict form's keys
DICT_KEYS = ("model_name", "model", "transforms")


def as_classifier(model: ModelInput, transforms: Callable[..., Any] | None = None) -> Classifier:
    """The ``Classifier`` behind any of the model forms ``benchmark`` accepts."""
    from oodbench.models import load

    if isinstance(model, Classifier):
        return model
    if isinstance(model, str):
        return load(model)
    if isinstance(model, Mapping):
        unknown = sorted(set(model) - set(DICT_KEYS))
        if unknown:
            raise InvalidInputError(
                f"the model dict takes the keys {DICT_KEYS} (the official code's form); got "
                f"unknown keys {unknown}"
            )
        name, module = model.get("model_name"), model.get("model")
        if module is None:
            if not name:
                raise InvalidInputError("the model dict needs 'model' or 'model_name'")
            return load(str(name))
        return _wrap_module(module, model.get("transforms", transforms), name)
    if isinstance(model, nn.Module):
        return _wrap_module(model, transforms, None)
    raise InvalidInputError(
        f"model must be a spec string, a Classifier, an nn.Module or a dict with {DICT_KEYS}; "
        f"got {type(model).__name__}"
    )


def _wrap_module(module: nn.Module, transforms: Any, name: Any) -> Classifier:
    from oodbench.models import wrap

    if isinstance(module, Classifier):
        return module
    linears = [n for n, m in module.named_modules() if isinstance(m, nn.Linear) and n]
    if not linears:
        raise InvalidInputError(
            f"{type(module).__name__} has no nn.Linear head to read the logits from; wrap it "
            "with oodbench.models.wrap(module, feature_layer=..., head_layer=...) and pass that"
        )
    spec = str(name) if name else f"module:{type(module).__name__}"
    return wrap(module, feature_layer=None, head_layer=linears[-1], transform=transforms,
                spec=spec)


def as_source(data: DataInput, role: str) -> Source | Activations:
    """A Source (an ``ImageFolder`` for a folder path) or the given Activations."""
    from oodbench.data import ImageFolder

    if isinstance(data, (Source, Activations)):
        return data
    if isinstance(data, (str, os.PathLike)):
        return ImageFolder(Path(data), name=Path(data).name)
    raise InvalidInputError(
        f"{role} must be a Source, Activations or a folder path (root/<class>/<image>); got "
        f"{type(data).__name__}"
    )


def as_detector(item: DetectorInput) -> Detector:
    """A ``Detector`` from a detector name, a paper kappa name or a ``Detector``."""
    from oodbench import detectors
    from oodbench.results.paper import kappa_for

    if isinstance(item, Detector):
        return item
    if not isinstance(item, str):
        raise InvalidInputError(f"detectors are names or Detector objects; got {item!r}")
    try:
        kappa = kappa_for(item)
    except UnknownNameError:
        return detectors.create(item)
    return detectors.create(kappa.detector, **kappa.hyperparams)


def _levels(levels: str | Sequence[int], n_levels: int) -> list[int]:
    if isinstance(levels, str):
        if levels != "all":
            raise InvalidInputError(f"levels must be 'all' or a list of levels; got {levels!r}")
        return list(range(n_levels))
    chosen = [int(v) for v in levels]
    bad = [v for v in chosen if not 0 <= v < n_levels]
    if bad:
        raise InvalidInputError(f"levels {bad} are outside 0..{n_levels - 1} (n_levels={n_levels})")
    return chosen


def benchmark(
    model: ModelInput,
    detectors: Sequence[DetectorInput] | DetectorInput = ("softmax",),
    *,
    id_test: DataInput,
    pool: DataInput,
    n_levels: int = 11,
    levels: str | Sequence[int] = "all",
    batch_size: int = 64,
    fit: DataInput | None = None,
    transforms: Callable[..., Any] | None = None,
    window: int | None = None,
    seed: int = 0,
    n_bootstrap: int = 0,
    device: str = "auto",
    out: str | os.PathLike[str] | None = None,
    progress: bool = False,
    **cood_options: Any,
) -> pd.DataFrame:
    """Benchmark one model on C-OOD severity levels with one or more detectors, in one call.

    Args:
        model: a spec string, a ``Classifier``, an ``nn.Module`` (with ``transforms``) or the
            official dict ``{"model_name", "model", "transforms"}``.
        detectors: names (oodbench detectors or the paper's kappas) or ``Detector`` objects.
        id_test: the ID test set (the paper: the ImageNet-1k validation set).
        pool: the OOD class pool, one class per folder (the paper: its filtered ImageNet-21k,
            ``oodbench cood-pool build``).
        n_levels: severity levels (the paper: 11). ``levels``: ``"all"`` or the levels to
            return (``levels_to_benchmark``).
        fit: ID training data for detectors that need training statistics (KNN, ...).
        window: OOD classes per level (default: the number of ID classes, as the paper).
        seed: the estimation/test split of the pool. ``n_bootstrap``: bootstrap replicates for
            FPR@95/AUPR intervals (0 = DeLong's AUROC interval only).
        out: a folder to keep the rows (``results/``, one file per cell) and the scores, for
            ``oodbench report`` and ``oodbench paper rank``.
        cood_options: more ``CoodBenchmark`` options (``estimation_fraction``,
            ``images_per_class``, ``selection``, ``id_classes``).

    Returns the tidy per-level table: one row per detector x level with ``model``, ``detector``,
    ``kappa`` (the paper's name, when it has one), ``level``, ``auroc`` with
    ``auroc_ci_low``/``auroc_ci_high``, FPR@95, AUPR, ``severity``, ``percentile``, ID accuracy
    and the benchmark's size (``n_id``, ``n_ood``, ``n_classes``, ``n_levels``,
    ``n_pool_classes``), ready for ``oodbench.results.paper.rank``.
    """
    from oodbench.benchmarks.cood import CoodBenchmark
    from oodbench.extract import extract
    from oodbench.results.paper import kappa_for

    chosen = _levels(levels, n_levels)
    items = [detectors] if isinstance(detectors, (str, Detector)) else list(detectors)
    if not items:
        raise InvalidInputError("benchmark needs at least one detector")
    dets = [as_detector(d) for d in items]
    classifier = as_classifier(model, transforms)
    bench = CoodBenchmark(as_source(id_test, "id_test"), as_source(pool, "pool"), window=window,
                          n_levels=n_levels, seed=seed, **cood_options)
    bench.n_bootstrap = n_bootstrap
    options: dict[str, Any] = {"batch_size": batch_size, "device": device, "progress": progress}
    fit_acts = None
    if any("train" in d.requires for d in dets):
        if fit is None:
            need = [d.name for d in dets if "train" in d.requires]
            raise InvalidInputError(f"detectors {need} need ID training data: pass fit=")
        fit_data = as_source(fit, "fit")
        fit_acts = fit_data if isinstance(fit_data, Activations) else extract(
            classifier, fit_data, capture=("logits", "features"), **options)
    start = time.perf_counter()
    measured = bench.measure(classifier, dets, fit_activations=fit_acts, **options)
    wide = measured.rows
    seconds = time.perf_counter() - start
    wide.insert(0, "model", classifier.spec)
    wide.insert(2, "kappa", [_kappa_or_empty(d, kappa_for) for d in wide["detector"]])
    if out is not None:
        _keep(wide, bench, measured.scores, dets, classifier.spec, Path(out), seconds)
    return wide[wide["level"].isin(chosen)].reset_index(drop=True)


def _kappa_or_empty(detector: str, kappa_for: Callable[[str], Any]) -> str:
    try:
        return str(kappa_for(detector).kappa)
    except UnknownNameError:
        return ""


def _identity(data: Source | Activations) -> str:
    """What a cell key knows of a data set: a Source's fingerprint, or the activations' own."""
    if isinstance(data, Source):
        return data.fingerprint()
    return str(data.meta.get("source_fingerprint", f"{len(data)} activations"))


def _keep(wide: pd.DataFrame, bench: Any, scores: Mapping[tuple[str, str], Any],
          dets: Sequence[Detector], model: str, out: Path, seconds: float) -> None:
    """Append the rows (one cell per detector) and the scores to the results folder ``out``."""
    import hashlib

    from oodbench.results import table as results_table

    table = results_table.ResultsTable(out)
    for det in dets:
        hp = hyperparams_json(det)
        rows = wide[(wide["detector"] == det.name) & (wide["hyperparams"] == hp)]
        ident = "|".join(["cood.benchmark", model, det.name, hp, str(bench.seed),
                          _identity(bench.id_test), _identity(bench.ood_pool),
                          str(bench.n_levels), str(bench.window)])
        cell = hashlib.sha256(ident.encode())
        key = cell.hexdigest()[:16]
        long = results_table.from_wide(
            rows.drop(columns=["model", "kappa"]).assign(seed=np.int64(bench.seed)), model=model,
            benchmark="cood", cell=key, seconds=seconds, time=results_table.now())
        kept = scores.get((det.name, hp))
        if kept is not None:
            table.save_scores(key, *kept)
        table.append(long)
