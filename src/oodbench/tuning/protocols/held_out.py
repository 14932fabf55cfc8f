"""The held-out-class protocol, oodbench's approximation: tune a detector without OOD data by
simulating OOD with ID classes. The paper's own Algorithms 1-4 (an M grid, S balanced tuning
sets, phi per M, M* chosen on resampled sets) are ``protocol="held_out_paper"``
(:mod:`oodbench.tuning.protocols.paper_protocol`); this module also builds the variants for both.

After Mondal, Xie, Duan, Wong & Sundaramoorthi, "Tuning Out-of-Distribution (OOD) Detectors Without
Given OOD Data", arXiv 2602.05935. From the ID training set D_t = {C_1, ..., C_n} (n classes):
withhold a random subset of M classes (the simulated OOD set), train a variant of the network on
the other n - M classes (the simulated ID set), repeat with N independent random draws, and
choose the detector's hyper-parameters phi that optimise an aggregate loss l(phi | M) over the
N variants. Here M is one fraction of the classes (or searched jointly with phi, which is
optimistically biased: the paper optimises phi per M and chooses M on fresh sets instead).

What this module does, per variant i = 1..N (all seeded, see below):

    W_i  = a random set of round(f * n) of the classes of ``fit``   (f = held_out_fraction)
    K_i  = the other classes of ``fit``
    net_i = the network trained on the fit rows of K_i only:
            retrain="head": a new linear head on the cached, frozen features (train_head);
            retrain="full": the model fine-tuned (oodbench.train.train) from its own weights,
                            its head cut to the rows of K_i, on the images of those rows
            retrain="last_block": the last block and the head retrained from cached inputs
                            of the last block (oodbench.tuning.last_block), no image pass
            retrain="scratch": a network re-initialised by the model factory and trained
                            from scratch on the images of those rows only, with the
                            original network's recipe (oodbench.tuning.scratch): the
                            paper's Algorithm 1, line 5
    simulated ID  = id_val rows of a class in K_i            (never used for training)
    simulated OOD = fit and id_val rows of any other class   (the variant never saw them)
    m_i(phi) = metric(detector_phi fitted on fit rows of K_i through net_i,
                      scored on simulated ID vs simulated OOD through net_i)

    l(phi | M) = mean_i m_i(phi)        (maximised for AUROC, minimised for FPR@95, ...)

Choices of this approximation (where it departs from the paper's Sec. 2 and 4.1, see
:mod:`oodbench.tuning.protocols.paper_protocol`):

* the aggregate is the mean of the criterion over the variants (``criterion``, default AUROC,
  the same criterion as the OOD-val protocol, so that the two protocols differ only in their
  data); its spread over the variants is reported next to it (``<criterion>_std``);
* ``n_variants=5`` and ``held_out_fraction=0.2`` by default (our choices); ``held_out_fraction``
  may be put in the search space to tune M jointly with phi (not what the paper does: it is
  biased towards the M whose tuning sets happen to be easiest); one tuning set per variant,
  not balanced (the paper: S balanced sets);
* ``retrain="head"`` keeps the backbone, which did see the withheld classes during its own
  training: the simulated OOD is therefore easier to tell apart in feature space than truly
  unseen classes, a known limitation of the fast path. ``retrain="full"`` fine-tunes every
  layer (``train={"trainable": ...}`` to change that) on the kept classes, starting from the
  given model, not from scratch as the paper trains its variants: the backbone's memory of the
  withheld classes fades only as far as the fine-tuning goes. It needs the live ``model`` and
  activations that still know their images (from ``oodbench.extract``);
* rows of ``id_val`` whose class never occurs in ``fit`` are simulated OOD for every variant
  (no variant was trained on them).

Seeds: the withheld classes of variant i are drawn with ``numpy.random.default_rng([seed, i,
M])``, and the variant is trained with seed ``seed * 1000 + i``; the same (data, seed, settings)
give the same variants, the same scores and therefore the same chosen hyper-parameters (on the
CPU; GPU kernels may round differently).

Cache: ``retrain="head"`` stores each variant's head under ``cache_dir()/tune/held_out/<key>.npz``;
the key hashes the fit features and labels (their bytes), the withheld classes, the training
settings and seed and the torch version. ``retrain="full"`` trains into
``cache_dir()/tune/held_out/full/<key>/`` (``oodbench.train``'s checkpoints, keyed by the
model's weights digest, the training images and labels, the settings and seed; a killed run
resumes there) and the variant's activations go through the activation cache. So a re-run (or
another detector tuned on the same data) reuses the variants without training, and a change to
any input trains new ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch

from oodbench import metrics
from oodbench.atomic_files import atomic_path
from oodbench.constraints import Bool, Integer, Interval, Options, Seed, field_error
from oodbench.data.source import RelabeledSource
from oodbench.detectors import Detector
from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.extract.activations import Activations
from oodbench.tuning.criteria import resolve_criterion
from oodbench.tuning.kept_classes import images_of, reindex, variant_dir, without_classes
from oodbench.tuning.protocol import Builder, Objective, TuningData, TuningProtocol, register
from oodbench.tuning.settings import ProtocolSettings, Table, declared_settings

#: bump when the variant layout or the cached file format changes
_FORMAT = 1
RETRAIN = ("head", "full", "last_block", "scratch")


#: the held-out fraction's declaration (a setting, and a name a search space may hold)
FRACTION = Interval(0, 1, "neither", note="the fraction of fit's classes withheld per variant")


#: a ``train`` setting: the trainer's options (their names are checked against the trainer of
#: ``retrain``, :func:`check_train_options`)
TrainOptions = Annotated[Mapping[str, Any],
                         Table("a table of the trainer's options, e.g. {epochs = 3}")]


def retrain_options(*values: str) -> Options:
    """``retrain``'s declaration: one of ``values``."""
    return Options(*values, note="how each variant is trained")


@dataclass(frozen=True)
class HeldOutClasses(ProtocolSettings):
    """Settings of the held-out-class protocol (see the module docstring).

    Attributes:
        n_variants: N, the number of simulated ID/OOD splits (network variants).
        held_out_fraction: the fraction of ``fit``'s classes withheld per variant (M = round(f n)).
        retrain: ``"head"`` (a new linear head on cached features), ``"full"`` (fine-tune
            the network on the kept classes' images), ``"last_block"`` or ``"scratch"`` (a
            fresh network trained on the kept classes' images only, :mod:`oodbench.tuning.scratch`).
        seed: seeds the withheld classes and the training.
        train: the trainer's options, flat: fields of
            :class:`~oodbench.train.optim.OptimSettings` (``epochs``, ``lr``, ...; they change
            the trainer's preset: ``HEAD`` for ``"head"``, ``FINETUNE`` for ``"full"``,
            ``LAST_BLOCK`` for ``"last_block"``) and, for :func:`oodbench.train.train_head`
            (``"head"``) ``loss``, ``loss_options``, ``device``, for
            :func:`oodbench.train.train` (``"full"``) also ``trainable``, ``amp``,
            ``num_workers``.
        cache: reuse and store variants under ``cache_dir()/tune/held_out``.
    """

    protocol = "held_out_classes"

    n_variants: Annotated[int, Integer(min=1, note="N, the network variants")] = 5
    held_out_fraction: Annotated[float, FRACTION] = 0.2
    retrain: Annotated[str, retrain_options(*RETRAIN)] = "head"
    seed: Seed = 0
    train: TrainOptions = field(default_factory=dict)
    cache: Bool = True

    def check(self) -> None:
        check_train_options(self.retrain, self.train, self.protocol)

    def describe(self) -> dict[str, Any]:
        """The settings that shape the result (for the ``tuning`` provenance record)."""
        return {"n_variants": self.n_variants, "held_out_fraction": self.held_out_fraction,
                "retrain": self.retrain, "seed": self.seed, "train": dict(self.train)}


#: retrain -> the trainer options a user may set besides the optimiser's
#: (:class:`~oodbench.train.optim.OptimSettings` fields, which change the trainer's preset:
#: ``HEAD``, ``FINETUNE``, ``LAST_BLOCK`` of :mod:`oodbench.train.optim`); seed, data and output
#: are the protocol's
_TRAINER_OPTIONS = {"head": frozenset({"loss", "loss_options", "device"}),
                    "full": frozenset({"loss", "loss_options", "device", "trainable", "amp",
                                       "num_workers"}),
                    "last_block": frozenset(),
                    "scratch": frozenset({"recipe", "loss", "loss_options", "device", "amp",
                                          "num_workers"})}


def train_options(retrain: str) -> frozenset[str]:
    """The ``train`` options of ``retrain``'s trainer (reads the optimiser's declarations,
    :mod:`oodbench.train.optim`: only called for a non-empty ``train``)."""
    from oodbench.train.optim import FIELDS

    return _TRAINER_OPTIONS[retrain] | frozenset(FIELDS)


#: the optimiser preset of :mod:`oodbench.train.optim` each ``retrain``'s trainer starts from
RETRAIN_PRESETS = {"head": "HEAD", "full": "FINETUNE", "last_block": "LAST_BLOCK",
                   "scratch": "RECIPE"}


def train_settings(retrain: str, train: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(``retrain``'s preset with the optimiser fields of ``train`` applied, validated against
    their declarations; the other options)."""
    from oodbench.train import optim

    return optim.from_options(train, getattr(optim, RETRAIN_PRESETS[retrain]))


def check_train_options(retrain: str, train: Mapping[str, Any], who: str) -> None:
    """Raise unless every key of ``train`` is an option of ``retrain``'s trainer (did-you-mean
    for a misspelt one) and its optimiser values are valid over the trainer's preset (so
    ``train = { epochs = 0 }`` stops the run before anything is extracted or trained). An
    empty ``train`` loads no training code."""
    if not train:
        return
    if retrain == "scratch":  # the recipe path and the general path take different options
        from oodbench.tuning.scratch import check_static

        check_static(train)
    allowed = train_options(retrain)
    unknown = sorted(set(train) - allowed)
    if unknown:
        trainer = {"head": "oodbench.train.train_head", "full": "oodbench.train.train",
                   "last_block": "oodbench.tuning.last_block",
                   "scratch": "oodbench.tuning.scratch"}[retrain]
        raise InvalidInputError(
            f"{who}: {UnknownNameError('train option', unknown[0], allowed)} (retrain="
            f"{retrain!r}: the options of {trainer})")
    if retrain == "scratch" and "recipe" in train:
        return  # the recipe's values were checked against the recipe (check_static)
    try:
        train_settings(retrain, train)
    except InvalidInputError as err:
        raise InvalidInputError(f"{who}: train = {{...}} of retrain={retrain!r}: {err}") from None


def check_fraction(value: Any) -> None:
    """Raise unless ``value`` is a valid ``held_out_fraction`` (its declaration)."""
    error = field_error(HeldOutClasses.protocol, "held_out_fraction", value,
                        declared_settings(HeldOutClasses)["held_out_fraction"])
    if error is not None:
        raise error


@dataclass
class Variant:
    """One simulated ID/OOD split and the network trained without its withheld classes.

    ``fit``, ``id_val`` and ``ood`` are already passed through the variant's network (logits,
    head weight and bias, with "full" also features, are the variant's; labels re-indexed to
    ``kept``, -1 elsewhere).
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
    for any ``held_out_fraction`` (memoised, so a search over M trains each split once).
    ``model`` (the live classifier) is needed for ``retrain="full"``."""

    def __init__(self, fit: Activations, id_val: Activations, config: HeldOutClasses,
                 model: Any = None):
        who = "tune(protocol='held_out_classes')"
        if config.retrain == "head":
            fit.require("features", who=f"{who} fit")
            id_val.require("features", who=f"{who} id_val")
        else:
            check_full(fit, id_val, model)
        if config.retrain == "scratch":
            from oodbench.tuning.scratch import check_options

            check_options(config.train, model)
        self.fit, self.id_val, self.config, self.model = fit, id_val, config, model
        self.classes = fit_classes(fit)
        withheld_count(len(self.classes), config.held_out_fraction)  # fail before any training
        self._digest: str | None = None
        self._inputs: dict[str, np.ndarray] | None = None
        self._memo: dict[int, list[Variant]] = {}
        #: (variant index, M) -> what a scratch variant trained on (``oodbench.tuning.scratch``)
        self.trained_on: dict[tuple[int, int], Any] = {}

    def variants(self, fraction: float | None = None) -> list[Variant]:
        """The variants withholding ``round(fraction * n)`` classes (default: the config's)."""
        return self.variants_m(withheld_count(
            len(self.classes), self.config.held_out_fraction if fraction is None else fraction))

    def variants_m(self, m: int) -> list[Variant]:
        """The ``n_variants`` variants that withhold ``m`` classes each."""
        if m not in self._memo:
            self._memo[m] = [self._variant(i, m) for i in range(self.config.n_variants)]
        return self._memo[m]

    def _variant(self, index: int, m: int) -> Variant:
        rng = np.random.default_rng([self.config.seed, index, m])
        withheld = np.sort(rng.choice(self.classes, size=m, replace=False))
        kept = np.setdiff1d(self.classes, withheld)
        fit_labels, val_labels = np.asarray(self.fit.labels), np.asarray(self.id_val.labels)
        sim_id = np.isin(val_labels, kept)
        if not sim_id.any():
            raise InvalidInputError(
                f"held_out_classes: variant {index} keeps {kept.size} classes but id_val has no "
                "sample of any of them; id_val needs samples of the classes in fit"
            )
        seed = self.config.seed * 1000 + index
        fit_kept = np.isin(fit_labels, kept)
        part: Callable[[Activations, np.ndarray], Activations]
        if self.config.retrain == "head":
            head, from_cache = self._head(kept, withheld, seed)
            part = lambda acts, rows: head.apply(acts.subset(rows))  # noqa: E731
        elif self.config.retrain == "last_block":
            from oodbench.tuning.last_block import LastBlockVariant

            inputs = self._block_inputs()
            train_rows = np.flatnonzero(fit_kept)
            block = LastBlockVariant(self.model, kept, inputs["fit"][train_rows],
                                     reindex(fit_labels[train_rows], kept), self.config.train, seed)
            from_cache = block.from_cache
            part = lambda acts, rows: block.apply(  # noqa: E731
                acts.subset(rows), inputs["fit" if acts is self.fit else "id_val"][rows])
        elif self.config.retrain == "scratch":
            from oodbench.tuning.scratch import train_scratch

            net, from_cache, trained_on = train_scratch(self.model, self.fit, kept, self.config.train,
                                                       seed, self.config.cache)
            self.trained_on[(index, m)] = trained_on
            part = lambda acts, rows: through(net, kept, acts.subset(rows))  # noqa: E731
        else:
            net, from_cache = self._network(kept, seed)
            part = lambda acts, rows: through(net, kept, acts.subset(rows))  # noqa: E731
        ood = Activations.concatenate([part(self.fit, np.flatnonzero(~fit_kept)),
                                       part(self.id_val, np.flatnonzero(~sim_id))])
        return Variant(index=index, kept=kept, withheld=withheld,
                       fit=part(self.fit, np.flatnonzero(fit_kept)),
                       id_val=part(self.id_val, np.flatnonzero(sim_id)),
                       ood=ood, from_cache=from_cache)

    def _block_inputs(self) -> dict[str, np.ndarray]:
        """The last block's input for every fit and id_val row (one cached pass each)."""
        if self._inputs is None:
            from oodbench.tuning.last_block import block_inputs

            self._inputs = {"fit": block_inputs(self.model, self.fit),
                            "id_val": block_inputs(self.model, self.id_val)}
        return self._inputs

    def _key(self, **parts: Any) -> str:
        return hashlib.sha256(json.dumps({"format": _FORMAT, "retrain": self.config.retrain,
                                          "torch": torch.__version__, **parts},
                                         sort_keys=True, default=str).encode()).hexdigest()

    def _head(self, kept: np.ndarray, withheld: np.ndarray, seed: int) -> tuple[Any, bool]:
        from oodbench.train import HeadResult, train_head

        options = {**self.config.train, "seed": seed}
        path = None
        if self.config.cache:
            if self._digest is None:
                self._digest = activations_digest(self.fit)
            path = variant_dir() / f"{self._key(fit=self._digest, withheld=withheld.tolist(), options=options)}.npz"
            if path.exists():
                with np.load(path, allow_pickle=False) as saved:
                    return HeadResult(weight=saved["weight"], bias=saved["bias"],
                                      classes=saved["classes"],
                                      config=json.loads(str(saved["config"]))), True
        optim, rest = train_settings("head", options)
        head = train_head(self.fit, classes=kept, optim=optim, **rest)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp, open(tmp, "wb") as f:
                np.savez(f, weight=head.weight, bias=head.bias, classes=head.classes,
                         config=np.array(json.dumps(head.config, default=str)))
        return head, False

    def _network(self, kept: np.ndarray, seed: int) -> tuple[Any, bool]:
        """The model fine-tuned on the images of the kept classes' fit rows (head cut to them)."""
        from oodbench.train import train
        from oodbench.train.checkpoint import STATE

        rows = np.flatnonzero(np.isin(self.fit.labels, kept))
        source = RelabeledSource(images_of(self.fit.subset(rows)), reindex(self.fit.labels[rows], kept))
        options = {"progress": False, **self.config.train, "seed": seed}
        key = self._key(model=self.model.spec, weights=self.model.weights_digest(),
                        images=source.fingerprint(), kept=kept.tolist(), options=options)
        with contextlib.ExitStack() as stack:
            out = (variant_dir() / "full" / key if self.config.cache
                   else Path(stack.enter_context(tempfile.TemporaryDirectory())))
            done = (out / STATE).exists()
            optim, rest = train_settings("full", options)
            result = train(without_classes(self.model, kept), source, out=out, optim=optim, **rest)
        return result.model, done and self.config.cache


def check_full(fit: Activations, id_val: Activations, model: Any) -> None:
    """Raise unless ``retrain="full"`` has what it needs: the model and the images."""
    if model is None:
        raise InvalidInputError(
            "held_out_classes with retrain='full' fine-tunes the network: pass model=classifier"
        )
    for name, acts in (("fit", fit), ("id_val", id_val)):
        if acts.source is None:
            raise InvalidInputError(
                f"held_out_classes with retrain='full' re-runs the images, but these {name} "
                "activations do not know their source; pass activations from oodbench.extract"
            )


def through(net: Any, kept: np.ndarray, acts: Activations) -> Activations:
    """``acts``' images through the variant network ``net`` (cached extraction), labels
    re-indexed to ``kept``."""
    from oodbench.extract import extract

    source = RelabeledSource(images_of(acts), reindex(acts.labels, kept))
    out = extract(net, source, capture=("logits", "features"), progress=False)
    return replace(out, meta={**out.meta, "restricted_classes": kept.tolist()})


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
            det = build(point).fit(variant.fit, id_val=variant.id_val)
            id_scores = det.score(variant.id_val)
            per_variant.append(metrics.evaluate(id_scores, det.score(variant.ood),
                                                id_correct=variant.id_val.correct))
        row = {key: float(np.mean([m[key] for m in per_variant])) for key in per_variant[0]}
        row[f"{criterion}_std"] = float(np.std([m[criterion] for m in per_variant]))
        row["n_variants"] = float(len(variants))
        return row

    return objective


@register
class HeldOutProtocol(TuningProtocol):
    """Mondal et al. (arXiv 2602.05935): no OOD data; OOD simulated by withheld ID classes."""

    name = "held_out_classes"
    settings = HeldOutClasses
    keyword = "held_out"
    needs = frozenset({"fit", "features"})  # the variants' heads train on the fit features
    space_params = frozenset({"held_out_fraction"})

    @classmethod
    def check_detector(cls, detector: type[Detector]) -> None:
        if "model" in detector.requires:
            raise InvalidInputError(
                f"tune: detector {detector.name!r} runs the live network, which the held-out-class "
                "protocol does not hand to detectors; tune it with protocol='ood_val'"
            )

    @classmethod
    def check_fit_classes(cls, settings: Any, space: Mapping[str, Any] | str,
                          n_classes: int) -> None:
        """Every ``held_out_fraction`` the tuning may use (the setting's, or the space's values
        or range ends) withholds at least one of the ``n_classes`` classes and keeps two."""
        fractions: Any = [cls.parse_settings(settings).held_out_fraction]
        if isinstance(space, Mapping):
            fractions = space.get("held_out_fraction", fractions)
        if isinstance(fractions, Mapping):  # a range: both of its ends
            fractions = [fractions.get("low"), fractions.get("high")]
        for fraction in fractions:
            withheld_count(n_classes, fraction)

    @classmethod
    def objective(cls, build: Builder, data: TuningData, criterion: str | None,
                  settings: Any) -> Objective:
        if data.ood_val is not None:
            raise InvalidInputError(
                "tune: protocol='held_out_classes' simulates OOD with withheld ID classes and "
                "takes no ood_val; pass ood_val=None (or use protocol='ood_val')"
            )
        if data.fit is None:
            raise InvalidInputError(
                "tune: protocol='held_out_classes' trains variants on labelled ID training "
                "activations: pass fit=train_activations"
            )
        config = cls.parse_settings(settings)
        name, larger = resolve_criterion(criterion, with_ood=True)
        factory = VariantFactory(data.fit, data.id_val, config, data.model)
        return Objective(held_out_objective(build, factory, name), name, larger, config.describe())
