"""Standard OOD benchmarks: one ID test set against named OOD sets, grouped near / far.

This is the shape of OpenOOD v1.5 (Zhang et al., arXiv 2306.09301: ImageNet-1k vs near-OOD
SSB-hard, NINCO and far-OOD iNaturalist, Textures, OpenImage-O) and of the MOS benchmark
(Huang & Li, CVPR 2021: ImageNet vs iNaturalist, SUN, Places, Textures). Every set is scored
against the same ID test set; the aggregate rows are OpenOOD's *unweighted* means over the
sets of a kind (each set counts once, whatever its size):

    metric(near) = (1 / |near|) * sum over near sets s of metric(ID, s)

and likewise for ``far`` and for ``all`` sets (MOS's "Average" column).

    bench = OodSetsBenchmark(id_source, {"inat": inat, "ssb": ssb}, kinds={"ssb": "near", "inat": "far"})
    table = bench.run(model, [create("msp"), create("energy")])

Named benchmarks (``oodbench.benchmarks.get("openood-v1.5-imagenet", root=...)``) are built
from the TOML specs in ``benchmarks/specs/``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from oodbench.benchmarks.base import (
    Benchmark,
    BenchmarkResult,
    GroupScores,
    capture_for,
    detector_list,
    ensure_fitted,
    hyperparams_json,
    id_correctness,
    needs_role,
    scores_key,
    skipped_images,
)
from oodbench.benchmarks.kinds import GROUP_KINDS
from oodbench.data.source import Source
from oodbench.detectors.base import Detector
from oodbench.errors import ClassCountMismatchError, EmptyInputError, InvalidInputError
from oodbench.extract.activations import Activations

KINDS = GROUP_KINDS  # what an OOD group may be
#: group names of the aggregate rows (an OOD set may not be called so)
AGGREGATES = ("near", "far", "all")
AGGREGATIONS = ("mean", "none")
#: metric keys a benchmark may headline (keys of ``oodbench.metrics.evaluate``)
METRICS = (
    "auroc",
    "fpr95_id",
    "fpr95_ood",
    "aupr_in",
    "aupr_out",
    "ap_in",
    "ap_out",
    "id_accuracy",
    "id_auroc",
    "aurc",
)

Data = Source | Activations


def _ids(data: Data) -> list[str]:
    return [str(i) for i in data.ids]


def split_indices(data: Data, id_split: Sequence[str] | Sequence[int] | np.ndarray) -> np.ndarray:
    """Row indices of ``data`` selected by ``id_split``: integer positions, or sample ids.

    Ids are matched by base name, so OpenOOD's ``imagenet_1k/val/ILSVRC2012_val_00000001.JPEG``
    selects the sample ``ILSVRC2012_val_00000001.JPEG`` of any ImageNet validation source.
    """
    split = np.asarray(id_split)
    if split.size == 0:
        raise EmptyInputError("id_split is empty")
    if np.issubdtype(split.dtype, np.integer):
        idx = split.astype(np.int64)
        if idx.min() < 0 or idx.max() >= len(data):
            raise InvalidInputError(f"id_split positions must lie in [0, {len(data)})")
        return idx
    position = {os.path.basename(i): k for k, i in enumerate(_ids(data))}
    wanted = [os.path.basename(str(s)) for s in split]
    missing = [w for w in wanted if w not in position]
    if missing:
        raise InvalidInputError(
            f"{len(missing)} of the {len(wanted)} ids of id_split are not samples of the ID test "
            f"set (first: {missing[:5]}); is it the full validation set?"
        )
    return np.asarray([position[w] for w in wanted], dtype=np.int64)


class OodSetsBenchmark(Benchmark):
    """An ID test set against several named OOD sets, with near / far / all averages.

    Args:
        id_test: the ID test set (a Source, or Activations already extracted).
        ood: OOD group name -> Source or Activations.
        kinds: group -> ``"near"`` or ``"far"`` (groups left out have kind ``""`` and enter
            only the ``all`` average).
        name: the benchmark's name (``"openood-v1.5-imagenet"``).
        id_split: keep only these samples of ``id_test`` (ids, matched by base name, or
            positions), e.g. OpenOOD's 45,000-image test split of the 50,000 validation images.
        headline: the metric columns reports lead with.
        aggregate: ``"mean"`` (aggregate rows, OpenOOD's unweighted mean) or ``"none"``.
        id_val, ood_val: OpenOOD's validation sets, for hyper-parameter search; ``run`` fits
            the detectors whose ``fit_data`` is ``"id_val"`` on ``id_val`` (as OpenOOD's
            postprocessors do) unless it is given ``id_val`` itself.
        description, paper: for listings and reports.

    ``run`` returns one row per (detector, OOD set) and, with ``aggregate="mean"``, per
    (detector, kind present) and (detector, ``all``) when there are at least two sets. Columns:
    ``detector``, ``hyperparams``, ``group``, ``kind``, ``is_average`` (True on the mean rows),
    ``n_id``, ``n_ood``, every key of ``oodbench.metrics.evaluate`` (with ``id_correct``
    when the ID labels are known), ``id_mean_kappa``, ``ood_mean_kappa`` and the provenance
    columns ``preset``, ``fit_data``, ``tuning``.
    """

    def __init__(
        self,
        id_test: Data,
        ood: Mapping[str, Data],
        *,
        kinds: Mapping[str, str] | None = None,
        name: str = "custom",
        id_split: Sequence[str] | Sequence[int] | np.ndarray | None = None,
        headline: Sequence[str] = ("auroc", "fpr95_ood"),
        aggregate: str = "mean",
        id_val: Data | None = None,
        ood_val: Data | None = None,
        description: str = "",
        paper: str = "",
    ):
        for label, value in [("id_test", id_test), *((f"ood[{g!r}]", s) for g, s in ood.items())]:
            if not isinstance(value, (Source, Activations)):
                raise InvalidInputError(
                    f"OodSetsBenchmark {label} must be a Source or Activations; got {type(value).__name__}"
                )
        if not ood:
            raise EmptyInputError("OodSetsBenchmark needs at least one OOD set")
        for group in ood:
            if not isinstance(group, str) or not group:
                raise InvalidInputError(f"OOD group names must be non-empty strings; got {group!r}")
            if group in AGGREGATES:
                raise InvalidInputError(
                    f"an OOD set may not be called {group!r}: {AGGREGATES} name the average rows"
                )
        kinds = {g: k for g, k in (kinds or {}).items() if k}  # "" / None: no kind
        unknown = sorted(set(kinds) - set(ood))
        if unknown:
            raise InvalidInputError(f"kinds names groups that are not OOD sets: {unknown}")
        bad = {g: k for g, k in kinds.items() if k not in KINDS}
        if bad:
            raise InvalidInputError(f"kinds must be 'near' or 'far'; got {bad}")
        wrong = [m for m in headline if m not in METRICS]
        if wrong:
            raise InvalidInputError(f"headline metrics {wrong} are not among {METRICS}")
        if aggregate not in AGGREGATIONS:
            raise InvalidInputError(f"aggregate must be one of {AGGREGATIONS}; got {aggregate!r}")
        if id_split is not None:
            id_test = id_test.subset(split_indices(id_test, id_split))
        self.id_test, self.ood, self.kinds = id_test, dict(ood), kinds
        self.name, self.headline, self.aggregate = name, tuple(headline), aggregate
        self.id_val, self.ood_val = id_val, ood_val
        self.description, self.paper = description, paper

    def __repr__(self) -> str:
        return f"OodSetsBenchmark(name={self.name!r}, ood={list(self.ood)})"

    # -- running ---------------------------------------------------------------------------
    def measure(
        self,
        model: Any,
        detectors: Sequence[Detector],
        *,
        fit_activations: Activations | None = None,
        id_val: Activations | None = None,
        **extract_options: Any,
    ) -> BenchmarkResult:
        """Score every OOD set (and the ID test set) with every detector; see the class doc."""
        from oodbench.metrics import evaluate

        detectors = detector_list(detectors, "OodSetsBenchmark")
        options = {"capture": capture_for(detectors), **extract_options}
        id_acts = self._activations(self.id_test, "the ID test set", model, options)
        ood_acts = {
            g: self._activations(s, f"OOD set {g!r}", model, options) for g, s in self.ood.items()
        }
        skipped = skipped_images(id_acts, *ood_acts.values())
        labels = np.asarray(id_acts.labels, dtype=np.int64)
        if labels.max() >= id_acts.num_classes:
            raise ClassCountMismatchError(
                f"ID labels go up to {int(labels.max())} but the model predicts "
                f"{id_acts.num_classes} classes: the ID set and the model do not match"
            )
        id_correct = id_correctness(id_acts)
        if id_val is None and self.id_val is not None and needs_role(detectors, "id_val"):
            id_val = self._activations(self.id_val, "the ID validation set", model, options)
        ensure_fitted(detectors, fit_activations, model, id_val)
        rows: list[dict[str, Any]] = []
        scores: dict[tuple[str, str], GroupScores] = {}
        for det in detectors:
            id_kappa = det.score(id_acts)
            sets = []
            group_scores: dict[str, np.ndarray] = {}
            for group, acts in ood_acts.items():
                ood_kappa = group_scores[group] = det.score(acts)
                metrics = evaluate(id_kappa, ood_kappa, id_correct=id_correct,
                                   **self.interval_options())
                sets.append(
                    {
                        "detector": det.name,
                        "hyperparams": hyperparams_json(det),
                        "group": group,
                        "kind": self.kinds.get(group, ""),
                        "is_average": False,
                        "n_id": int(id_kappa.size),
                        "n_ood": int(ood_kappa.size),
                        **{k: float(v) for k, v in metrics.items()},
                        "id_mean_kappa": float(id_kappa.mean()),
                        "ood_mean_kappa": float(ood_kappa.mean()),
                        **det.provenance(),
                    }
                )
            rows += sets
            if self.aggregate == "mean":
                rows += mean_rows(sets)
            scores[scores_key(det)] = (id_kappa, group_scores)
        return BenchmarkResult(pd.DataFrame(rows), scores, skipped)

    @staticmethod
    def _activations(data: Data, what: str, model: Any, options: dict[str, Any]) -> Activations:
        if isinstance(data, Activations):
            acts = data
        else:
            if model is None:
                raise InvalidInputError(
                    f"{what} is a Source: pass a model to run(), or Activations instead of Sources"
                )
            from oodbench.extract import extract

            acts = extract(model, data, **options)
        if len(acts) == 0:
            raise EmptyInputError(f"{what} has no samples (were all its images skipped?)")
        return acts


def mean_rows(sets: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenOOD's aggregate rows: the unweighted mean of every metric over the sets of each kind
    present (``near``, ``far``) and over all sets (``all``, when there are two or more).

    ``n_ood`` of an aggregate row is the total over its sets; other numbers are plain means
    (interval bounds are not: a mean of bounds is no interval, so they are left out).
    """
    out = []
    groups = [(k, [s for s in sets if s["kind"] == k]) for k in KINDS]
    if len(sets) >= 2:
        groups.append(("all", list(sets)))
    for name, members in groups:
        if not members:
            continue
        first = members[0]
        row = {
            "detector": first["detector"],
            "hyperparams": first["hyperparams"],
            "group": name,
            "kind": name,
            "is_average": True,
            "n_id": first["n_id"],
            "n_ood": int(sum(m["n_ood"] for m in members)),
        }
        row.update({k: v for k, v in first.items() if k not in row and isinstance(v, str)})  # provenance
        numeric = [k for k, v in first.items()
                   if k not in row and isinstance(v, float) and "_ci_" not in k]
        row.update({k: float(np.mean([m[k] for m in members])) for k in numeric})
        out.append(row)
    return out
