"""The ``Detector`` contract and the registry every detector file registers into.

A detector is a small dataclass whose fields are its hyper-parameters (sklearn-style):

    det = oodbench.detectors.create("energy", temperature=1.0)
    det = oodbench.detectors.create("react", preset="openood")   # OpenOOD v1.5's configuration
    det.fit(train_activations, model, id_val=val_activations)   # each detector fits on its own data
    kappa = det.score(test_activations) # one float per sample, higher = more in-distribution

``score`` returns the C-OOD paper's confidence function kappa(x): higher means "more
in-distribution". Every hyper-parameter that ran is in ``det.hyperparams``.

**Fit data.** A detector that learns statistics (``"train"`` in ``requires``) fits on one of two
roles of ID data (``FIT_DATA``): ``"train"``, the ID training activations (KNN's bank,
Mahalanobis' class means), or ``"id_val"``, held-out ID validation activations (temperature
scaling and KL-matching by their papers, ReAct's and VRA's thresholds in OpenOOD). The class
declares its paper's role in ``default_fit_data``; a preset or ``create(..., fit_data=...)``
changes it, and it is part of ``hyperparams`` (a different role is a different configuration).

**Provenance.** ``create(name, preset=...)`` records the preset in ``det.preset``;
``det.provenance()`` gives the ``preset`` / ``fit_data`` / ``tuning`` values that the benchmarks
write into every results row (``protocol`` names a preset whose values were then changed, e.g.
``"openood (modified: k)"``).
"""

from __future__ import annotations

import dataclasses
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import numpy as np

from oodbench.constraints import (
    Check,
    Declared,
    Interval,
    Options,
    declarations,
    described,
    undeclared,
    unknown_names,
    validate,
)
from oodbench.errors import InvalidInputError, NonFiniteError, OodbenchError
from oodbench.extract.activations import Activations
from oodbench.registry import Registry, summary

#: what a detector may declare in ``requires`` (``"train"``: ``fit`` needs ID activations, of
#: the role ``fit_data`` names)
INPUTS = frozenset(
    {"logits", "features", "feature_map", "head", "train", "model", "text_embeddings", "groups"}
)
#: the roles of ID data a detector can fit on: the ID training set, held-out ID validation data
FIT_DATA = ("train", "id_val")
#: ``fit_data`` of a detector that learns nothing from ID data
NO_FIT_DATA = "none"


def integer_fields(cls: type) -> tuple[str, ...]:
    """The hyper-parameters of detector class ``cls`` declared integers (``Integer(...)``)."""
    return tuple(name for name, d in declarations(cls).items()
                 if isinstance(d.constraint, Interval) and d.constraint.integer)


class UntunedDefaultsWarning(UserWarning):
    """A detector whose defaults need tuning (``Detector.untuned_defaults``) ran untuned."""


class NotFittedError(OodbenchError, RuntimeError):
    """``score`` was called before ``fit`` on a detector that needs training statistics."""


@dataclass
class Detector(ABC):
    """Base class: subclasses are dataclasses whose fields are hyper-parameters.

    Class attributes every subclass sets:
        name: registry name (``"msp"``).
        requires: inputs from ``INPUTS``; ``"train"`` means ``fit`` needs ID activations (of the
            role ``fit_data``), ``"model"`` that it runs the live network, ``"head"`` the linear
            head's weights, ``"groups"`` a group-softmax head (MOS), so ``"all"`` leaves it out.
        paper: the citation (authors, venue, year, arXiv id).
        default_fit_data: the role of ID data its paper fits on (``FIT_DATA``).
        score_only_hyperparams: hyper-parameters that change only ``score``, not what ``fit``
            learns (KNN's k: the bank is the same); a tuning grid over them fits once.
        untuned_defaults: the hyper-parameters whose class defaults are no published
            configuration (only the centre of a paper's search box: PLF, VRA+); fitting with all
            of them at their defaults and no tuning raises an :class:`UntunedDefaultsWarning`,
            and ``oodbench list detectors`` marks the detector ("defaults need tuning" in its presets column).

    Hyper-parameters are declared, not checked: each field's annotation carries its valid values
    (``k: Annotated[int, Integer(min=1)] = 50``, see :mod:`oodbench.constraints`) and ``checks``
    holds the constraints between fields (:class:`~oodbench.constraints.Check`); the base's
    ``__post_init__`` validates them all, once, with one message format.

    Fields every detector has besides its own: ``fit_data`` (keyword only; ``None`` = the class's
    ``default_fit_data``, ``"none"`` for detectors that fit on no ID data), and the provenance
    attributes ``preset`` and ``tuning`` (set by :func:`create` and :func:`oodbench.tune`).
    """

    name: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset({"logits"})
    paper: ClassVar[str] = ""
    default_fit_data: ClassVar[str] = "train"
    score_only_hyperparams: ClassVar[frozenset[str]] = frozenset()
    untuned_defaults: ClassVar[tuple[str, ...]] = ()

    checks: ClassVar[tuple[Check, ...]] = ()

    fit_data: Annotated[str | None, Options(*FIT_DATA, note="None: the class's default_fit_data")] = (
        field(default=None, kw_only=True))
    preset: str = field(default="", init=False, repr=False, compare=False)
    tuning: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Settle ``fit_data`` and check every hyper-parameter against its declaration (the one
        place detectors are validated: subclasses declare, they do not check)."""
        self._fitted = False
        self._settle_fit_data()
        values = {name: getattr(self, name) for name in declared_hyperparameters(type(self))}
        validate(f"detector {self.name!r}", declared_hyperparameters(type(self)), self.checks,
                 values)

    def _settle_fit_data(self) -> None:
        """``fit_data``: ``"none"`` for a detector that fits on no ID data, the class's
        ``default_fit_data`` for ``None``, else one of ``FIT_DATA``."""
        if not self.fits_on_data:
            if self.fit_data not in (None, NO_FIT_DATA):
                raise InvalidInputError(
                    f"detector {self.name!r} learns nothing from ID data, so fit_data="
                    f"{self.fit_data!r} has no meaning; leave it out"
                )
            self.fit_data = NO_FIT_DATA
        elif self.fit_data is None:
            self.fit_data = self.default_fit_data
        elif self.fit_data not in FIT_DATA:
            raise InvalidInputError(
                f"detector {self.name!r}: fit_data must be one of {FIT_DATA} (the ID training "
                f"set or held-out ID validation data); got {self.fit_data!r}"
            )

    # -- public API -------------------------------------------------------------------------
    @property
    def hyperparams(self) -> dict[str, Any]:
        """The hyper-parameters this detector runs with (its dataclass fields; ``fit_data`` only
        for detectors that fit on ID data)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.init and (f.name != "fit_data" or self.fits_on_data)
        }

    @property
    def fits_on_data(self) -> bool:
        """True when ``fit`` learns statistics from ID activations (``"train"`` in ``requires``)."""
        return "train" in self.requires

    @property
    def needs_fit(self) -> bool:
        """True when ``score`` needs ``fit`` first (training statistics, the live model or text)."""
        return bool({"train", "model", "text_embeddings"} & self.requires)

    @property
    def protocol(self) -> str:
        """The preset this detector was created from (``""``: none), with the names of the values
        the preset sets that were changed since, e.g. ``"openood (modified: k)"`` (settings the
        preset leaves alone, such as a batch size, are not a change of protocol)."""
        if not self.preset:
            return ""
        from oodbench.detectors.presets import preset_for

        current = self.hyperparams
        changed = sorted(k for k, v in preset_for(self.name, self.preset).values().items()
                         if current.get(k) != v)
        return f"{self.preset} (modified: {', '.join(changed)})" if changed else self.preset

    def provenance(self) -> dict[str, str]:
        """How this detector's numbers were made, under the results table's column names."""
        return {"preset": self.protocol, "fit_data": str(self.fit_data), "tuning": self.tuning}

    def fit(
        self, train: Activations | None = None, model: Any = None, *,
        id_val: Activations | None = None,
    ) -> Detector:
        """Learn what the detector needs from ID activations (and/or the live model).

        ``train``: ID training activations; ``id_val``: held-out ID validation activations. A
        detector that learns statistics fits on the one its ``fit_data`` names (the other may be
        ``None``); the rest ignore both.
        """
        data = self._fit_activations(train, id_val)
        if data is not None:
            data.require(*self._array_inputs(), who=f"detector {self.name!r}")
        if "model" in self.requires and model is None:
            raise InvalidInputError(
                f"detector {self.name!r} runs the live network: call fit(train, model=classifier)"
            )
        if "text_embeddings" in self.requires and not hasattr(model, "encode_text"):
            raise InvalidInputError(
                f"detector {self.name!r} needs a CLIP model's text encoder: call "
                "fit(train, model=oodbench.models.load('clip:<arch>/<pretrained tag>'))"
            )
        self.warn_untuned()
        self._fit(data, model)
        self._fitted = True
        return self

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has run."""
        return self._fitted

    def runs_untuned(self) -> bool:
        """True when every one of ``untuned_defaults`` is at its class default and the detector
        was not tuned (``tuning`` empty)."""
        if not self.untuned_defaults or self.tuning:
            return False
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.init}
        return all(getattr(self, name) == defaults[name] for name in self.untuned_defaults)

    def warn_untuned(self) -> None:
        """The :class:`UntunedDefaultsWarning` when :meth:`runs_untuned` (``fit`` calls it; a
        run calls it again for each further cell that scores with the same fitted detector)."""
        if self.runs_untuned():
            warnings.warn(
                f"detector {self.name!r} runs with its untuned defaults "
                f"({', '.join(f'{k}={getattr(self, k)!r}' for k in self.untuned_defaults)}), "
                "which are only the centre of its paper's search box, not a published "
                "configuration, and can score below chance; tune it (oodbench.tune("
                f"{self.name!r}, 'paper', ...) or tune = {{ ... }} in the experiment) or give "
                "its hyper-parameters", UntunedDefaultsWarning, stacklevel=3)

    def _fit_activations(
        self, train: Activations | None, id_val: Activations | None
    ) -> Activations | None:
        """The activations ``fit`` learns from (``fit_data``'s role), or an error naming it."""
        if not self.fits_on_data:
            return None
        data = train if self.fit_data == "train" else id_val
        if data is None:
            what = (
                "ID training activations: call fit(train_activations)"
                if self.fit_data == "train"
                else "held-out ID validation activations: call fit(train, id_val=val_activations), "
                "or create it with fit_data='train' to fit on the training set instead"
            )
            raise InvalidInputError(
                f"detector {self.name!r} fits on {self.fit_data!r} data, so it needs {what}"
            )
        return data

    def score(self, acts: Activations) -> np.ndarray:
        """kappa(x) for every row of ``acts``: float64, higher = more in-distribution."""
        if self.needs_fit and not self._fitted:
            raise NotFittedError(
                f"detector {self.name!r} must be fitted first: call .fit(train_activations"
                + (", model" if {"model", "text_embeddings"} & self.requires else "") + ")"
            )
        acts.require(*self._array_inputs(), who=f"detector {self.name!r}")
        scores = np.asarray(self._score(acts), dtype=np.float64).reshape(-1)
        if scores.shape[0] != len(acts):
            raise RuntimeError(f"detector {self.name!r} returned {scores.shape[0]} scores for {len(acts)} samples")
        nan = np.isnan(scores)
        if nan.any():
            first = np.flatnonzero(nan)[:5].tolist()
            raise NonFiniteError(
                f"detector {self.name!r} produced {int(nan.sum())} NaN scores of {len(scores)} "
                f"(first rows {first}, ids {[str(acts.ids[i]) for i in first]}); check the logits "
                f"and features of those samples for NaN/inf"
            )
        return scores

    def describe(self) -> dict[str, Any]:
        """Name, hyper-parameters, paper and provenance, for the results table."""
        return {"detector": self.name, "hyperparams": self.hyperparams, "paper": self.paper,
                **self.provenance()}

    # -- for subclasses -----------------------------------------------------------------------
    def _fit(self, train: Activations | None, model: Any) -> None:  # noqa: B027 - optional hook
        """Override to learn statistics from ``train`` (the activations of the ``fit_data``
        role, ``None`` for detectors that fit on no ID data); the default needs nothing."""

    @abstractmethod
    def _score(self, acts: Activations) -> np.ndarray:
        """Compute kappa for every row of ``acts`` (inputs are already validated)."""

    def _array_inputs(self) -> tuple[str, ...]:
        names: list[str] = []
        for need in ("logits", "features", "feature_map"):
            if need in self.requires:
                names.append(need)
        if "head" in self.requires:
            names += ["head_weight", "head_bias"]
        return tuple(names)


# -- registry -------------------------------------------------------------------------------
#: every detector, by name; each declares the inputs it ``requires`` and the valid values of
#: every hyper-parameter (both checked on registration)
_REGISTRY: Registry[type[Detector]] = Registry(
    "detector", declares=("requires", INPUTS), undeclared=undeclared,
    builtins="oodbench.detectors")
#: every detector, by name (the registry; ``register`` adds to it)
DETECTORS = _REGISTRY
#: class decorator: add a detector to the registry under ``cls.name``
register = _REGISTRY.register


def detector_class(name: str) -> type[Detector]:
    """The registered class for ``name`` (``UnknownNameError`` with the closest names)."""
    return _REGISTRY.lookup(name)


def hyperparameter_names(name: str) -> tuple[str, ...]:
    """The hyper-parameters detector ``name`` declares (its dataclass fields), sorted."""
    return tuple(sorted(f.name for f in dataclasses.fields(detector_class(name)) if f.init))


def declared_hyperparameters(cls: type[Detector]) -> dict[str, Declared]:
    """The declarations of ``cls``'s own hyper-parameters (every field but ``fit_data``, which
    the base settles), by name: what :meth:`Detector.__post_init__` checks, and what listings,
    the documentation table and search-space bounds read."""
    return {n: d for n, d in declarations(cls).items() if n != "fit_data"}


def check_configuration(name: str, keys: Iterable[str] = (), preset: str | None = None) -> None:
    """What :func:`create` checks before it builds anything, from the declarations alone: that
    ``name`` is registered, that it declares every hyper-parameter of ``keys`` (with the closest
    names for one it lacks) and, with a ``preset``, that the preset configures it. The values
    are checked against their declarations when the detector is created."""
    wrong = unknown_names(f"detector {name!r}", keys, hyperparameter_names(name))
    if wrong:
        raise InvalidInputError(wrong)
    if preset is not None:
        from oodbench.detectors.presets import preset_for

        preset_for(name, preset)


def create(name: str, *, preset: str | None = None, **hyperparams: Any) -> Detector:
    """Build a detector by registry name, e.g. ``create("knn", k=50)``.

    ``preset``: start from a protocol's configuration (``"paper"``, ``"openood"``, ``"cood"``,
    ``"cood_code"``; see :mod:`oodbench.detectors.presets`): its hyper-parameters and fit data;
    explicit keyword arguments override them. ``None``: the class's defaults.
    """
    check_configuration(name, hyperparams)
    cls = detector_class(name)
    if preset is None:
        return cls(**hyperparams)
    from oodbench.detectors.presets import preset_for

    chosen = preset_for(name, preset)
    det = cls(**{**chosen.values(), **hyperparams})
    det.preset = preset
    return det


def available() -> list[dict[str, Any]]:
    """One entry per registered detector: name, required inputs, defaults (with ``fit_data``
    for detectors that fit on ID data), the valid values of each hyper-parameter (``ranges``,
    from its declaration) and the checks between them (``checks``), the presets it has, paper,
    and the hyper-parameters whose defaults need tuning (``untuned_defaults``)."""
    from oodbench.detectors.presets import presets_of

    rows = []
    for name, cls in sorted(_REGISTRY.items()):
        rows.append(
            {"name": name, "requires": sorted(cls.requires), "defaults": cls().hyperparams,
             **described(declared_hyperparameters(cls), cls.checks),
             "presets": presets_of(name), "paper": cls.paper,
             "untuned_defaults": list(cls.untuned_defaults), "summary": summary(cls)}
        )
    return rows


ScoreFn = Callable[[Activations], np.ndarray]
