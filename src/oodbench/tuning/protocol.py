"""Tuning protocols as registry entries: how one point of a search space is scored.

A protocol is a :class:`TuningProtocol` subclass registered in :data:`PROTOCOLS` (one file,
``@register``); ``oodbench.tune(..., protocol=NAME)`` and an experiment's
``tune = { protocol = NAME, ... }`` find it by name. The entry declares

* ``settings``: the schema of its own keys (beside ``space``, ``search``, ... in an
  experiment's ``tune`` table; ``settings=`` of ``oodbench.tune``), a :class:`~oodbench.schema.Schema`;
* ``uses_ood``: whether it scores on an OOD validation source (an experiment entry must then
  give ``ood = {...}``, and must not otherwise);
* ``needs``: what the runner must hand it: ``"fit"`` (labelled ID training activations),
  ``"model"`` (the live classifier), ``"features"`` (features captured by the extraction);
* ``space_params``: names a space may hold besides the detector's hyper-parameters;
* ``keyword``: a keyword of ``oodbench.tune`` that carries its settings too (``held_out=``);
* :meth:`TuningProtocol.check_fit_classes`: what it asks of the number of ID classes (checked
  by an experiment before any extraction);

and how it runs: :meth:`TuningProtocol.objective` returns the point -> metrics function that
the search (grid, TPE or GP, :mod:`oodbench.tuning.dispatch`) maximises, or, for a protocol
that searches in stages of its own (``runs_own_search``), :meth:`TuningProtocol.tune` runs it.
The built-in protocols are the files of :mod:`oodbench.tuning.protocols`, loaded on the
registry's first read: ``ood_val`` (``ood_val.py``), ``held_out_classes`` (``held_out.py``),
``held_out_paper`` (``paper_protocol.py``), ``noise`` and ``fgsm`` (``synthetic.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from oodbench.errors import ConfigError, InvalidInputError, UnknownNameError
from oodbench.registry import Registry
from oodbench.schema import Schema, parse

if TYPE_CHECKING:  # the declarations load no detector or extraction code
    from oodbench.detectors.base import Detector
    from oodbench.extract.activations import Activations

#: what a protocol may need from the runner
NEEDS = frozenset({"fit", "model", "features"})

#: point -> metrics
PointObjective = Callable[[Mapping[str, Any]], dict[str, float]]
#: point -> detector with those hyper-parameters (``oodbench.tuning.space.detector_builder``)
Builder = Callable[[Mapping[str, Any]], "Detector"]


class NoSettings(Schema):
    """A protocol without settings of its own."""


@dataclass(frozen=True)
class Objective:
    """What a protocol scores: ``score(point)`` -> metrics, the ``criterion`` among them,
    whether larger is better, and the protocol's ``provenance`` (its settings, for the record)."""

    score: PointObjective
    criterion: str
    larger_is_better: bool
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TuningData:
    """The data a protocol scores a point on: ID validation activations, optional OOD
    validation activations, the ID training activations and the live model (may be None)."""

    id_val: Activations
    ood_val: Activations | None
    fit: Activations | None
    model: Any


class TuningProtocol:
    """Base of every tuning protocol (see the module docstring)."""

    name: ClassVar[str] = ""
    settings: ClassVar[type[Schema]] = NoSettings
    uses_ood: ClassVar[bool] = False
    needs: ClassVar[frozenset[str]] = frozenset()
    space_params: ClassVar[frozenset[str]] = frozenset()
    #: a keyword of ``oodbench.tune`` that also carries the settings (``held_out=``), or ""
    keyword: ClassVar[str] = ""
    #: True when the protocol runs its whole search itself (:meth:`tune`) instead of handing
    #: an objective to the grid / Bayesian search
    runs_own_search: ClassVar[bool] = False

    @classmethod
    def entry_settings(cls, given: Mapping[str, Any], seed: int) -> dict[str, Any]:
        """The settings an experiment's ``tune`` table hands the protocol: the keys of
        ``settings`` it gives, and (for a protocol that wants it) the table's ``seed``."""
        return dict(given)

    @classmethod
    def parse_settings(cls, settings: Any) -> Any:
        """``settings`` validated as the protocol's schema (``InvalidInputError`` naming it)."""
        if isinstance(settings, cls.settings):
            return settings
        return parse(cls.settings, dict(settings or {}), file=f"tune protocol {cls.name!r}",
                     error=ConfigError)

    @classmethod
    def check_detector(cls, detector: type[Detector]) -> None:
        """Raise when the protocol cannot tune ``detector`` (default: it can)."""

    @classmethod
    def check_fit_classes(cls, settings: Any, space: Mapping[str, Any] | str,
                          n_classes: int) -> None:
        """Raise when ``settings`` (and ``space``) cannot run on ID fit data of ``n_classes``
        classes; run by an experiment's checks before anything is extracted or trained
        (default: any number will do)."""

    @classmethod
    def objective(cls, build: Builder, data: TuningData, criterion: str | None,
                  settings: Any) -> Objective:
        """The point -> metrics function to search (``settings``: :meth:`parse_settings`)."""
        raise NotImplementedError

    @classmethod
    def tune(cls, build: Builder, dims: Mapping[str, Any], data: TuningData,
             criterion: str | None, search: str, detector: str, settings: Any,
             options: Mapping[str, Any]) -> Any:
        """The whole search, for a protocol with ``runs_own_search`` (returns a ``TuneResult``;
        ``options``: the search options of ``oodbench.tune``, ``n_trials``, ``seed``, ...)."""
        raise NotImplementedError


#: every tuning protocol, by name
PROTOCOLS: Registry[type[TuningProtocol]] = Registry(
    "tuning protocol", declares=("needs", NEEDS),
    builtins="oodbench.tuning.protocols")


#: class decorator: add a tuning protocol to :data:`PROTOCOLS`
register = PROTOCOLS.register


def protocol_class(name: str) -> type[TuningProtocol]:
    """The protocol registered as ``name`` (``InvalidInputError`` listing the others)."""
    try:
        return PROTOCOLS.lookup(name)
    except UnknownNameError:
        raise InvalidInputError(
            f"tune: unknown protocol {name!r}; use one of {sorted(PROTOCOLS)}") from None
