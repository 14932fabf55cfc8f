"""The held-out-class protocol: tune a detector without OOD data by simulating OOD with ID classes.

Mondal, Xie, Duan, Wong & Sundaramoorthi, "Tuning Out-of-Distribution (OOD) Detectors Without
Given OOD Data", arXiv 2602.05935. From the ID training set D_t = {C_1, ..., C_n} (n classes):
withhold a random subset of M classes (the simulated OOD set), train a variant of the network on
the other n - M classes (the simulated ID set), repeat with N independent random draws, and
choose the detector's hyper-parameters phi that optimise an aggregate loss l(phi | M) over the
N variants (searched with Bayesian optimisation, M tuned jointly with phi).

What this module does, per variant i = 1..N (all seeded, see below):

    W_i  = a random set of round(f * n) of the classes of ``fit``   (f = held_out_fraction)
    K_i  = the other classes of ``fit``
    head_i = train_head(fit rows of K_i)                     (retrain="head": a new linear head
                                                              on the cached, frozen features)
    simulated ID  = id_val rows of a class in K_i            (never used for training)
    simulated OOD = fit and id_val rows of any other class   (the variant never saw them)
    m_i(phi) = metric(detector_phi fitted on fit rows of K_i through head_i,
                      scored on simulated ID vs simulated OOD through head_i)

    l(phi | M) = mean_i m_i(phi)        (maximised for AUROC, minimised for FPR@95, ...)

Choices made here where the paper's full text was not available to us (only its abstract could
be read when this was written; check these against its Sec. 4 before claiming to reproduce it):

* the aggregate is the mean of the criterion over the variants (``criterion``, default AUROC,
  the same criterion as the OOD-val protocol, so that the two protocols differ only in their
  data); its spread over the variants is reported next to it (``<criterion>_std``);
* ``n_variants=5`` and ``held_out_fraction=0.2`` by default; ``held_out_fraction`` may be put in
  the search space to tune M jointly, as the paper does;
* ``retrain="head"`` keeps the backbone, which did see the withheld classes during its own
  training: the simulated OOD is therefore easier to tell apart in feature space than truly
  unseen classes, a known limitation of the fast path (``retrain="full"``, which retrains the
  network without them, needs ``oodbench.train``'s fine-tuning);
* rows of ``id_val`` whose class never occurs in ``fit`` are simulated OOD for every variant
  (no variant was trained on them).

Seeds: the withheld classes of variant i are drawn with ``numpy.random.default_rng([seed, i,
M])``, and the head is trained with seed ``seed * 1000 + i``; the same (data, seed, settings)
give the same variants, the same scores and therefore the same chosen hyper-parameters.

Cache: each variant's head is stored under ``cache_dir()/tune/held_out/<key>.npz``; the key
hashes the fit features and labels (their bytes), the withheld classes, the head's training
settings and seed and the torch version, so a re-run (or another detector tuned on the same
data) reuses the variants without training and a change to any input trains new ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import metrics
from oodbench.config import cache_dir
from oodbench.detectors import Detector
from oodbench.errors import InvalidInputError
from oodbench.extract._atomic import atomic_path
from oodbench.extract.activations import Activations

#: bump when the variant layout or the cached file format changes
_FORMAT = 1
RETRAIN = ("head", "full")


@dataclass(frozen=True)
class HeldOutClasses:
    """Settings of the held-out-class protocol (see the module docstring).

    Attributes:
        n_variants: N, the number of simulated ID/OOD splits (network variants).
        held_out_fraction: the fraction of ``fit``'s classes withheld per variant (M = round(f n)).
        retrain: ``"head"`` (a new linear head on cached features) or ``"full"``.
        seed: seeds the withheld classes and the heads.
        head: keyword arguments of :func:`oodbench.train.train_head` (``epochs``, ``lr``, ...).
        cache: reuse and store variants under ``cache_dir()/tune/held_out``.
    """

    n_variants: int = 5
    held_out_fraction: float = 0.2
    retrain: str = "head"
    seed: int = 0
    head: Mapping[str, Any] = field(default_factory=dict)
    cache: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.n_variants, int) and self.n_variants >= 1):
            raise InvalidInputError(f"held_out_classes: n_variants must be an integer >= 1; got {self.n_variants!r}")
        check_fraction(self.held_out_fraction)
        if self.retrain not in RETRAIN:
            raise InvalidInputError(
                f"held_out_classes: retrain must be one of {list(RETRAIN)}; got {self.retrain!r}"
            )
        if self.retrain == "full":
            raise InvalidInputError(
                "held_out_classes: retrain='full' needs oodbench.train's fine-tuning with classes "
                "withheld, which this version does not provide; use retrain='head'"
            )
        unknown = set(self.head) - _HEAD_OPTIONS
        if unknown:
            raise InvalidInputError(
                f"held_out_classes: unknown head option(s) {sorted(unknown)}; "
                f"train_head takes {sorted(_HEAD_OPTIONS)}"
            )

    def describe(self) -> dict[str, Any]:
        """The settings that shape the result (for the ``tuning`` provenance record)."""
        return {"n_variants": self.n_variants, "held_out_fraction": self.held_out_fraction,
                "retrain": self.retrain, "seed": self.seed, "head": dict(self.head)}


_HEAD_OPTIONS = frozenset({"loss", "loss_options", "epochs", "batch_size", "lr", "weight_decay",
                           "optimizer", "schedule", "warmup_epochs", "device"})


def check_fraction(value: Any) -> None:
    """Raise unless ``0 < value < 1``."""
    if not (isinstance(value, (int, float)) and 0.0 < float(value) < 1.0):
        raise InvalidInputError(
            f"held_out_classes: held_out_fraction must lie strictly between 0 and 1; got {value!r}"
        )


@dataclass
class Variant:
    """One simulated ID/OOD split and the head trained without its withheld classes.

    ``fit``, ``id_val`` and ``ood`` are already passed through the variant's head (logits, head
    weight and bias are the variant's; labels re-indexed to ``kept``, -1 elsewhere).
    """

    index: int
    kept: np.ndarray
    withheld: np.ndarray
    fit: Activations
    id_val: Activations
    ood: Activations
    from_cache: bool


def fit_classes(fit: Activations) -> np.ndarray:
    """The sorted class ids that occur in ``fit`` (labels >= 0)."""
    labels = np.asarray(fit.labels)
    return np.unique(labels[labels >= 0])


def withheld_count(n_classes: int, fraction: float) -> int:
    """M = round(fraction * n), checked: at least one class withheld and two kept."""
    check_fraction(fraction)
    if n_classes < 3:
        raise InvalidInputError(
            f"held_out_classes needs at least 3 classes in fit (withhold one, keep two); "
            f"fit has {n_classes}"
        )
    m = int(round(fraction * n_classes))
    if not 1 <= m <= n_classes - 2:
        raise InvalidInputError(
            f"held_out_fraction={fraction} of {n_classes} classes withholds {m}; it must withhold "
            f"between 1 and {n_classes - 2} (use a fraction between {1.5 / n_classes:.3g} and "
            f"{(n_classes - 2.5) / n_classes:.3g})"
        )
    return m


def activations_digest(acts: Activations) -> str:
    """sha256 of the features' and labels' bytes (in row chunks; memory-mapped arrays are fine)."""
    acts.require("features", who="tune(protocol='held_out_classes')")
    digest = hashlib.sha256()
    features, labels = acts.features, np.asarray(acts.labels, dtype=np.int64)
    assert features is not None
    digest.update(json.dumps([list(features.shape), str(features.dtype)]).encode())
    step = max(1, (64 << 20) // max(1, features.itemsize * features.shape[1]))
    for start in range(0, len(features), step):
        digest.update(np.ascontiguousarray(features[start : start + step]).tobytes())
    digest.update(labels.tobytes())
    return digest.hexdigest()


class VariantFactory:
    """Builds (or loads from the cache) the variants of one (fit, id_val, settings) triple,
    for any ``held_out_fraction`` (memoised, so a search over M trains each split once)."""

    def __init__(self, fit: Activations, id_val: Activations, config: HeldOutClasses):
        fit.require("features", who="tune(protocol='held_out_classes') fit")
        id_val.require("features", who="tune(protocol='held_out_classes') id_val")
        self.fit, self.id_val, self.config = fit, id_val, config
        self.classes = fit_classes(fit)
        self._digest: str | None = None
        self._memo: dict[int, list[Variant]] = {}

    def variants(self, fraction: float | None = None) -> list[Variant]:
        m = withheld_count(len(self.classes), self.config.held_out_fraction if fraction is None
                           else fraction)
        if m not in self._memo:
            self._memo[m] = [self._variant(i, m) for i in range(self.config.n_variants)]
        return self._memo[m]

    def _variant(self, index: int, m: int) -> Variant:
        rng = np.random.default_rng([self.config.seed, index, m])
        withheld = np.sort(rng.choice(self.classes, size=m, replace=False))
        kept = np.setdiff1d(self.classes, withheld)
        head, from_cache = self._head(kept, withheld, seed=self.config.seed * 1000 + index)
        fit_labels, val_labels = np.asarray(self.fit.labels), np.asarray(self.id_val.labels)
        sim_id = np.isin(val_labels, kept)
        if not sim_id.any():
            raise InvalidInputError(
                f"held_out_classes: variant {index} keeps {kept.size} classes but id_val has no "
                "sample of any of them; id_val needs samples of the classes in fit"
            )
        ood = Activations.concatenate([
            self.fit.subset(np.flatnonzero(np.isin(fit_labels, withheld))),
            self.id_val.subset(np.flatnonzero(~sim_id)),
        ])
        return Variant(
            index=index, kept=kept, withheld=withheld,
            fit=head.apply(self.fit.subset(np.flatnonzero(np.isin(fit_labels, kept)))),
            id_val=head.apply(self.id_val.subset(np.flatnonzero(sim_id))),
            ood=head.apply(ood), from_cache=from_cache,
        )

    def _head(self, kept: np.ndarray, withheld: np.ndarray, seed: int) -> tuple[Any, bool]:
        from oodbench.train import HeadResult, train_head

        options = {**self.config.head, "seed": seed}
        path = None
        if self.config.cache:
            if self._digest is None:
                self._digest = activations_digest(self.fit)
            key = hashlib.sha256(json.dumps({
                "format": _FORMAT, "fit": self._digest, "withheld": withheld.tolist(),
                "retrain": self.config.retrain, "options": options, "torch": torch.__version__,
            }, sort_keys=True, default=str).encode()).hexdigest()
            path = variant_dir() / f"{key}.npz"
            if path.exists():
                with np.load(path, allow_pickle=False) as saved:
                    return HeadResult(weight=saved["weight"], bias=saved["bias"],
                                      classes=saved["classes"],
                                      config=json.loads(str(saved["config"]))), True
        head = train_head(self.fit, classes=kept, **options)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp, open(tmp, "wb") as f:
                np.savez(f, weight=head.weight, bias=head.bias, classes=head.classes,
                         config=np.array(json.dumps(head.config, default=str)))
        return head, False


def variant_dir() -> Path:
    """Where variant heads are cached."""
    return cache_dir() / "tune" / "held_out"


def held_out_objective(
    build: Callable[[Mapping[str, Any]], Detector],
    factory: VariantFactory,
    criterion: str,
) -> Callable[[Mapping[str, Any]], dict[str, float]]:
    """point -> the metrics of ``metrics.evaluate`` averaged over the variants, plus
    ``<criterion>_std`` (their spread) and ``n_variants``. A point may carry
    ``held_out_fraction`` (then the variants of that fraction are used)."""

    def objective(point: Mapping[str, Any]) -> dict[str, float]:
        variants = factory.variants(point.get("held_out_fraction"))
        per_variant = []
        for variant in variants:
            det = build(point).fit(variant.fit)
            id_scores = det.score(variant.id_val)
            per_variant.append(metrics.evaluate(id_scores, det.score(variant.ood),
                                                id_correct=variant.id_val.correct))
        row = {key: float(np.mean([m[key] for m in per_variant])) for key in per_variant[0]}
        row[f"{criterion}_std"] = float(np.std([m[criterion] for m in per_variant]))
        row["n_variants"] = float(len(variants))
        return row

    return objective
