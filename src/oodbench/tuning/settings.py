"""A tuning protocol's settings, declared as data: one frozen dataclass per protocol.

Each field declares its valid values in its annotation (:mod:`oodbench.constraints`)::

    @dataclass(frozen=True)
    class HeldOutClasses(ProtocolSettings):
        protocol = "held_out_classes"
        n_variants: Annotated[int, Integer(min=1, note="N, the network variants")] = 5

and :class:`ProtocolSettings` checks them all, once, when an instance is made (one uniform,
one-line ``InvalidInputError``: ``held_out_classes: n_variants must be an integer >= 1; got
0``). The same class is what ``oodbench.tune(..., settings=...)`` takes and what the protocol's
keys of an experiment's ``tune = {...}`` table are validated as (:mod:`oodbench.tuning.spec`:
the table's keys are :meth:`ProtocolSettings.table_keys`), so no setting is declared twice.

This module is light: it imports no detector, training or extraction code, so that validating
a tune table loads none.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

from oodbench.constraints import Check, Constraint, Declared, ListOf, declarations, validate
from oodbench.errors import InvalidInputError

S = TypeVar("S", bound="ProtocolSettings")


@dataclass(frozen=True)
class Table(Constraint):
    """A table (a mapping of names to values); ``what`` says what it holds."""

    what: str = "a table"
    note: str = ""

    def describe(self) -> str:
        return self.what

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, Mapping) else self.describe()


def declared_settings(cls: type[ProtocolSettings] | type) -> dict[str, Declared]:
    """The declarations of a settings class's fields (:func:`oodbench.constraints.declarations`)."""
    return declarations(cast(type, cls))


@dataclass(frozen=True)
class ProtocolSettings:
    """Base of every protocol's settings (see the module docstring).

    Subclasses set ``protocol`` (the name that starts their messages), declare their fields
    with constraints, list the constraints between fields in ``checks`` and, for a check that
    needs code (the trainer's option names), override :meth:`check`."""

    protocol: ClassVar[str] = ""
    checks: ClassVar[tuple[Check, ...]] = ()
    #: fields an experiment's tune table does not hold: ``seed`` (the table's own ``seed`` is
    #: handed on, :meth:`~oodbench.tuning.protocol.TuningProtocol.entry_settings`) and
    #: ``cache`` (the API's switch)
    not_in_table: ClassVar[frozenset[str]] = frozenset({"seed", "cache"})

    def __post_init__(self) -> None:
        """Check every field against its declaration and the checks between fields (the one
        place a protocol's settings are validated)."""
        declared = declared_settings(type(self))
        validate(self.protocol, declared, self.checks,
                 {name: getattr(self, name) for name in declared})
        self.check()

    def check(self) -> None:
        """Checks that need code beyond the declarations (default: none)."""

    @classmethod
    def keys(cls) -> list[str]:
        """Every setting's name, in field order."""
        return [f.name for f in dataclasses.fields(cls) if f.init]

    @classmethod
    def table_keys(cls) -> list[str]:
        """The settings an experiment's ``tune`` table may give."""
        return [k for k in cls.keys() if k not in cls.not_in_table]

    @classmethod
    def normalise(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` with its lists of list-valued settings made tuples (the frozen form)."""
        lists = {n for n, d in declared_settings(cls).items() if isinstance(d.constraint, ListOf)}
        return {k: tuple(v) if k in lists and isinstance(v, list) else v for k, v in given.items()}

    @classmethod
    def from_mapping(cls: type[S], settings: S | Mapping[str, Any] | None) -> S:
        """``settings`` as this class (a mapping's unknown keys raise, naming the known ones)."""
        if isinstance(settings, cls):
            return settings
        given = dict(settings or {})  # type: ignore[arg-type]
        known = cls.keys()
        unknown = sorted(set(given) - set(known))
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInputError(
                f"{cls.protocol}: unknown setting(s) {unknown}{hint}; the settings are "
                f"{sorted(known)}")
        return cls(**cls.normalise(given))


@dataclass(frozen=True)
class NoSettings(ProtocolSettings):
    """A protocol without settings of its own."""
