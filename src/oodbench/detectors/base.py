"""The ``Detector`` contract and the registry every detector file registers into.

A detector is a small dataclass whose fields are its hyper-parameters (sklearn-style):

    det = oodbench.detectors.create("energy", temperature=1.0)
    det.fit(train_activations, model)   # no-op for detectors that need no statistics
    kappa = det.score(test_activations) # one float per sample, higher = more in-distribution

``score`` returns the C-OOD paper's confidence function kappa(x): higher means "more
in-distribution". Every hyper-parameter that ran is in ``det.hyperparams``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from oodbench.errors import InvalidInputError, NonFiniteError, OodbenchError, UnknownNameError
from oodbench.extract.activations import Activations

#: what a detector may declare in ``requires``
INPUTS = frozenset(
    {"logits", "features", "feature_map", "head", "train", "model", "text_embeddings", "groups"}
)


class NotFittedError(OodbenchError, RuntimeError):
    """``score`` was called before ``fit`` on a detector that needs training statistics."""


@dataclass
class Detector(ABC):
    """Base class: subclasses are dataclasses whose fields are hyper-parameters.

    Class attributes every subclass sets:
        name: registry name (``"msp"``).
        requires: inputs from ``INPUTS``; ``"train"`` means ``fit`` needs ID training activations,
            ``"model"`` that it runs the live network, ``"head"`` the linear head's weights,
            ``"groups"`` a group-softmax head (MOS), so ``"all"`` leaves it out.
        paper: the citation (authors, venue, year, arXiv id).
    """

    name: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset({"logits"})
    paper: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self._fitted = False

    # -- public API -------------------------------------------------------------------------
    @property
    def hyperparams(self) -> dict[str, Any]:
        """The hyper-parameters this detector runs with (its dataclass fields)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    @property
    def needs_fit(self) -> bool:
        """True when ``score`` needs ``fit`` first (training statistics, the live model or text)."""
        return bool({"train", "model", "text_embeddings"} & self.requires)

    def fit(self, train: Activations | None = None, model: Any = None) -> Detector:
        """Learn what the detector needs from ID training activations (and/or the live model)."""
        if "train" in self.requires:
            if train is None:
                raise InvalidInputError(
                    f"detector {self.name!r} needs ID training activations: call "
                    f"fit(train_activations) with activations of the ID training set"
                )
            train.require(*self._array_inputs(), who=f"detector {self.name!r}")
        if "model" in self.requires and model is None:
            raise InvalidInputError(
                f"detector {self.name!r} runs the live network: call fit(train, model=classifier)"
            )
        if "text_embeddings" in self.requires and not hasattr(model, "encode_text"):
            raise InvalidInputError(
                f"detector {self.name!r} needs a CLIP model's text encoder: call "
                "fit(train, model=oodbench.models.load('clip:<arch>/<pretrained tag>'))"
            )
        self._fit(train, model)
        self._fitted = True
        return self

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
        """Name, hyper-parameters and paper, for the results table."""
        return {"detector": self.name, "hyperparams": self.hyperparams, "paper": self.paper}

    # -- for subclasses -----------------------------------------------------------------------
    def _fit(self, train: Activations | None, model: Any) -> None:  # noqa: B027 - optional hook
        """Override to learn statistics; the default needs nothing."""

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
_REGISTRY: dict[str, type[Detector]] = {}
D = TypeVar("D", bound=type[Detector])


def register(cls: D) -> D:
    """Class decorator: add a detector to the registry under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} must set the class attribute 'name'")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"detector name {cls.name!r} registered twice")
    unknown = set(cls.requires) - INPUTS
    if unknown:
        raise TypeError(f"{cls.__name__}.requires has unknown inputs {sorted(unknown)}")
    _REGISTRY[cls.name] = cls
    return cls


def detector_class(name: str) -> type[Detector]:
    """The registered class for ``name`` (``UnknownNameError`` with the closest names)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError("detector", name, _REGISTRY) from None


def create(name: str, **hyperparams: Any) -> Detector:
    """Build a detector by registry name, e.g. ``create("knn", k=50)``."""
    cls = detector_class(name)
    valid = {f.name for f in dataclasses.fields(cls) if f.init}
    wrong = set(hyperparams) - valid
    if wrong:
        raise InvalidInputError(
            f"detector {name!r} has no hyper-parameter {', '.join(sorted(wrong))}; "
            f"it takes {', '.join(sorted(valid)) or 'none'}"
        )
    return cls(**hyperparams)


def available() -> list[dict[str, Any]]:
    """One entry per registered detector: name, required inputs, defaults and paper."""
    rows = []
    for name in sorted(_REGISTRY):
        cls = _REGISTRY[name]
        defaults = {
            f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(cls)
            if f.init
        }
        rows.append(
            {"name": name, "requires": sorted(cls.requires), "defaults": defaults, "paper": cls.paper,
             "summary": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""}
        )
    return rows


ScoreFn = Callable[[Activations], np.ndarray]
