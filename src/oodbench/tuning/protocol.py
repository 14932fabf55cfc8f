"""Tuning protocols as registry entries: what a protocol scores; the one search is elsewhere.

A protocol is a :class:`TuningProtocol` subclass registered in :data:`PROTOCOLS` (one file,
``@register``); ``oodbench.tune(..., protocol=NAME)`` and an experiment's
``tune = { protocol = NAME, ... }`` find it by name. The entry declares

* ``settings``: its settings, a :class:`~oodbench.tuning.settings.ProtocolSettings` dataclass
  whose fields declare their valid values (:mod:`oodbench.constraints`); the same class is
  ``settings=`` of ``oodbench.tune`` and the protocol's keys of an experiment's ``tune`` table
  (a pydantic :class:`~oodbench.schema.Schema` also serves, validated as a configuration
  section);
* ``uses_ood``: whether it scores on an OOD validation source (an experiment entry must then
  give ``ood = {...}``, and must not otherwise);
* ``needs``: what the runner must hand it: ``"fit"`` (labelled ID training activations),
  ``"model"`` (the live classifier), ``"features"`` (features captured by the extraction);
* ``space_params``: names a space may hold besides the detector's hyper-parameters;
* ``keyword``: a keyword of ``oodbench.tune`` that carries its settings too (``held_out=``);
* :meth:`TuningProtocol.check_fit_classes`: what it asks of the number of ID classes (checked
  by an experiment before any extraction);

and supplies only its data and criterion: :meth:`TuningProtocol.objective` returns an
:class:`Objective`, one or more :class:`Stage` s of point -> metrics functions. The search
itself -- enumerating a grid or sampling with Optuna, scoring each trial, recording the rows,
choosing the winner (and, for a protocol of several stages, the stage), fitting the returned
detector -- is :func:`oodbench.tuning.dispatch.search`, the same for every protocol. The
built-in protocols are the files of :mod:`oodbench.tuning.protocols`, loaded on the registry's
first read: ``ood_val`` (``ood_val.py``), ``held_out_classes`` (``held_out.py``),
``held_out_paper`` (``paper_protocol.py``), ``noise`` and ``fgsm`` (``synthetic.py``). Those
files import no training code at module level: validating settings loads none.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from oodbench.constraints import undeclared
from oodbench.errors import ConfigError, InvalidInputError, UnknownNameError
from oodbench.registry import Registry
from oodbench.tuning.settings import NoSettings, ProtocolSettings

if TYPE_CHECKING:  # the declarations load no detector or extraction code
    from oodbench.detectors.base import Detector
    from oodbench.extract.activations import Activations

#: what a protocol may need from the runner
NEEDS = frozenset({"fit", "model", "features"})

#: point -> metrics
PointObjective = Callable[[Mapping[str, Any]], dict[str, float]]
#: point -> detector with those hyper-parameters (``oodbench.tuning.space.detector_builder``)
Builder = Callable[[Mapping[str, Any]], "Detector"]


@dataclass(frozen=True)
class Stage:
    """One search of a protocol: ``score(point)`` -> metrics (the criterion among them).

    A protocol of several stages (``held_out_paper``: one per M; ``noise`` / ``fgsm``: one per
    level h) also gives ``validate(point)``, the metrics of the stage's winner on fresh draws,
    which choose the stage; ``value`` is what the stage is recorded as (M, h) and ``key`` the
    integer that seeds its sampler (``seed + key``) and names its Optuna study
    (``<study_name>-<label><key>``). ``fitted()``: the detector that scored the last point,
    when it is fitted on the data the returned detector is fitted on (``ood_val``), so that
    the winner needs no second fit; ``share(point)``: a key under which grid points share one
    fit (the grid visits them together)."""

    score: PointObjective
    validate: PointObjective | None = None
    value: Any = None
    key: int = 0
    fitted: Callable[[], Detector] | None = None
    share: Callable[[Mapping[str, Any]], Hashable] | None = None


@dataclass(frozen=True)
class Objective:
    """What a protocol scores: ``score`` (point -> metrics) for a protocol of one search, or
    its ``stages`` (an iterable, consumed in order: a stage may train what it needs when it is
    reached); the ``criterion``, whether larger is better, and the protocol's ``provenance``
    (its settings, for the record).

    ``label`` names the stages of a protocol of several (``"M"``, ``"h"``: the table's column,
    ``per_<label>`` and ``<label>_star`` in the record); ``""`` for a protocol of one search.
    ``signature``: what identifies one stage's stored Optuna study besides the detector, the
    space, the stage and the criterion (default: the record so far)."""

    score: PointObjective | None
    criterion: str
    larger_is_better: bool
    provenance: dict[str, Any] = field(default_factory=dict)
    stages: Iterable[Stage] = ()
    label: str = ""
    signature: dict[str, Any] | None = None

    def all_stages(self) -> Iterable[Stage]:
        """The stages to search: ``stages``, or one stage of ``score``."""
        return [Stage(self.score)] if self.score is not None else self.stages


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
    settings: ClassVar[type[ProtocolSettings]] = NoSettings
    uses_ood: ClassVar[bool] = False
    needs: ClassVar[frozenset[str]] = frozenset()
    space_params: ClassVar[frozenset[str]] = frozenset()
    #: a keyword of ``oodbench.tune`` that also carries the settings (``held_out=``), or ""
    keyword: ClassVar[str] = ""

    @classmethod
    def entry_settings(cls, given: Mapping[str, Any], seed: int) -> dict[str, Any]:
        """The settings an experiment's ``tune`` table hands the protocol: the keys of
        ``settings`` it gives, and the table's ``seed`` where the settings have one."""
        schema: Any = cls.settings
        wants_seed = issubclass(schema, ProtocolSettings) and "seed" in schema.keys()
        return {**given, "seed": seed} if wants_seed else dict(given)

    @classmethod
    def parse_settings(cls, settings: Any) -> Any:
        """``settings`` as the protocol's settings class (validated once, one-line
        ``InvalidInputError``; a pydantic ``settings`` schema is parsed as a configuration
        section)."""
        schema: Any = cls.settings
        if isinstance(settings, schema):
            return settings
        if schema is NoSettings and settings is not None and dict(settings):
            raise InvalidInputError(
                f"tune: protocol {cls.name!r} takes no settings; got {sorted(dict(settings))}")
        if not issubclass(schema, ProtocolSettings):
            from oodbench.schema import parse

            return parse(schema, dict(settings or {}), file=f"tune protocol {cls.name!r}",
                         error=ConfigError)
        return schema.from_mapping(settings)

    @classmethod
    def table_keys(cls) -> list[str]:
        """The protocol's keys of an experiment's ``tune`` table."""
        schema: Any = cls.settings
        if issubclass(schema, ProtocolSettings):
            return schema.table_keys()
        return list(schema.model_fields)

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
        """What to search (``settings``: :meth:`parse_settings`); raises before any work when
        the data cannot serve the protocol."""
        raise NotImplementedError


#: every tuning protocol, by name
PROTOCOLS: Registry[type[TuningProtocol]] = Registry(
    "tuning protocol", declares=("needs", NEEDS),
    undeclared=lambda entry: (undeclared(entry.settings)
                              if issubclass(entry.settings, ProtocolSettings) else ()),
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
