"""Hyper-parameters declared as data: each dataclass field's valid values, checked in one place.

A field declares its range in its annotation, with ``typing.Annotated``:

    temperature: Annotated[float, Interval(0, None, closed="neither")] = 1.0   # > 0
    percentile: Percentile = 90.0                      # an alias: Annotated[float, Interval(0, 100)]
    k: Annotated[int, Integer(min=1)] = 50
    gradient: Annotated[str, Options("logits", "softmax")] = "logits"
    threshold: Annotated[float | None, Finite()] = None  # None passes: the type admits it
    gammas: Annotated[tuple[float, ...], ListOf(Interval(0, None, "neither"))]
    constraint: Annotated[float | str, AnyOf(Options("estimate"), Interval(0))] = "estimate"

and a constraint between fields is a :class:`Check` in the class's ``checks``:

    checks = (Check(("lower_percentile", "upper_percentile"), operator.le,
                    "lower_percentile <= upper_percentile"),)

:func:`validate` checks a configuration against them and raises one uniform, one-line
``InvalidInputError`` (``detector 'energy': temperature must be > 0; got -1.0``);
:func:`declarations` reads them for listings, documentation and search-space bounds, so that the
valid ranges are written once. :func:`unknown_names` explains a name the class does not declare
(with the closest ones). A dataclass that derives from :class:`DeclaredFields` is validated so
on creation (losses, ``OptimSettings``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from oodbench.errors import InvalidInputError

Closed = Literal["both", "left", "right", "neither"]


class Constraint:
    """What a field's values may be. Subclasses say whether a value is accepted and describe the
    accepted values as the phrase that follows "must be" (``"> 0"``, ``"one of 'a', 'b'"``)."""

    note: str = ""

    def problem(self, value: Any) -> str | None:
        """``None`` when ``value`` is accepted, else the phrase it fails ("an integer", "> 0")."""
        raise NotImplementedError

    def describe(self) -> str:
        """Every accepted value, as the phrase after "must be"."""
        raise NotImplementedError


def is_number(value: Any) -> bool:
    """A real number (Python or numpy), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


@dataclass(frozen=True)
class Interval(Constraint):
    """A finite number between ``low`` and ``high`` (``None``: unbounded on that side);
    ``closed`` says which ends belong to it; ``integer`` asks for an integer."""

    low: float | None = None
    high: float | None = None
    closed: Closed = "both"
    integer: bool = False
    note: str = ""

    def _kind(self) -> str:
        return "an integer" if self.integer else "a finite number"

    def _range(self) -> str:
        left = self.closed in ("both", "left")
        right = self.closed in ("both", "right")
        if self.low is not None and self.high is not None:
            return (f"in {'[' if left else '('}{_bound(self.low)}, {_bound(self.high)}"
                    f"{']' if right else ')'}")
        if self.low is not None:
            return f"{'>=' if left else '>'} {_bound(self.low)}"
        if self.high is not None:
            return f"{'<=' if right else '<'} {_bound(self.high)}"
        return ""

    def describe(self) -> str:
        span = self._range()
        if not span:
            return self._kind()
        return f"an integer {span}" if self.integer else span

    def contains(self, value: float) -> bool:
        """Whether the number ``value`` lies in the interval (the type is not checked)."""
        v = float(value)
        if not math.isfinite(v):
            return False
        if self.low is not None and not (v >= self.low if self.closed in ("both", "left")
                                         else v > self.low):
            return False
        return self.high is None or (v <= self.high if self.closed in ("both", "right")
                                     else v < self.high)

    def problem(self, value: Any) -> str | None:
        if not (is_integer(value) if self.integer else is_number(value)):
            return "an integer" if self.integer else "a number"
        return None if self.contains(value) else self.describe()


def Integer(min: int | None = None, max: int | None = None, note: str = "") -> Interval:  # noqa: A002, N802
    """An integer in ``[min, max]`` (``None``: unbounded on that side)."""
    return Interval(min, max, "both", integer=True, note=note)


def Finite(note: str = "") -> Interval:  # noqa: N802 - reads as a constraint class
    """Any finite number."""
    return Interval(note=note)


def _same(value: Any, option: Any) -> bool:
    """``value == option`` without counting ``True`` as ``1``."""
    return isinstance(value, bool) == isinstance(option, bool) and bool(value == option)


@dataclass(frozen=True, init=False)
class Options(Constraint):
    """One of a fixed set of values."""

    values: tuple[Any, ...]
    note: str = ""

    def __init__(self, *values: Any, note: str = "") -> None:
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "note", note)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)

    def problem(self, value: Any) -> str | None:
        return None if any(_same(value, v) for v in self.values) else self.describe()


@dataclass(frozen=True)
class ListOf(Constraint):
    """A list (or tuple) whose every item satisfies ``item``: at least ``min_items`` of them
    (default 1: non-empty), exactly ``size`` when given, strictly increasing when
    ``increasing``: ``ListOf(Integer(min=1))``, ``ListOf(Finite(), size=3)``,
    ``ListOf(Integer(min=1), min_items=0, increasing=True)`` (a step schedule's milestones)."""

    item: Constraint
    min_items: int = 1
    size: int | None = None
    increasing: bool = False
    note: str = ""

    def describe(self) -> str:
        count = (f"a list of {self.size}" if self.size is not None else "a list"
                 if self.min_items == 0 else "a non-empty list" if self.min_items == 1
                 else f"a list of at least {self.min_items}")
        return f"{count}, each {self.item.describe()}" + (", increasing" if self.increasing else "")

    def problem(self, value: Any) -> str | None:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            return self.describe()
        if len(value) < self.min_items or (self.size is not None and len(value) != self.size):
            return self.describe()
        if any(self.item.problem(v) is not None for v in value):
            return self.describe()
        if self.increasing and any(b <= a for a, b in zip(value, value[1:])):
            return self.describe()
        return None


@dataclass(frozen=True)
class Flag(Constraint):
    """``True`` or ``False``."""

    note: str = ""

    def describe(self) -> str:
        return "True or False"

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) or type(value).__name__ == "bool_" else self.describe()


@dataclass(frozen=True)
class Text(Constraint):
    """A string; ``what`` says what it holds (a prompt, a path, a device); ``test``, when given,
    says whether a string is one (``what`` then describes what it asks)."""

    what: str = "a string"
    note: str = ""
    test: Callable[[str], bool] | None = dataclasses.field(default=None, compare=False)

    def describe(self) -> str:
        return self.what

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, str) or (self.test is not None and not self.test(value)):
            return self.describe()
        return None


@dataclass(frozen=True, init=False)
class AnyOf(Constraint):
    """A value that one of ``constraints`` accepts (``"estimate"`` or a number >= 0)."""

    constraints: tuple[Constraint, ...]
    note: str = ""

    def __init__(self, *constraints: Constraint, note: str = "") -> None:
        object.__setattr__(self, "constraints", constraints)
        object.__setattr__(self, "note", note)

    def describe(self) -> str:
        return " or ".join(", ".join(repr(v) for v in c.values) if isinstance(c, Options)
                           else c.describe() for c in self.constraints)

    def problem(self, value: Any) -> str | None:
        return None if any(c.problem(value) is None for c in self.constraints) else self.describe()


@dataclass(frozen=True)
class Validated(Constraint):
    """A value that ``validator`` checks (raising its own ``OodbenchError`` naming the problem,
    e.g. a file that cannot be read); ``what`` describes the accepted values."""

    what: str
    validator: Callable[[Any], object] = dataclasses.field(repr=False, compare=False,
                                                           default=lambda value: None)
    note: str = ""

    def describe(self) -> str:
        return self.what

    def problem(self, value: Any) -> str | None:
        self.validator(value)
        return None


@dataclass(frozen=True)
class Check:
    """A constraint between fields: ``test(*values of names)`` must be true; ``requirement``
    says what it asks, in the fields' names (``"lower_percentile <= upper_percentile"``)."""

    names: tuple[str, ...]
    test: Callable[..., bool] = dataclasses.field(compare=False)
    requirement: str = ""

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the check holds for ``values`` (a mapping of at least ``names``)."""
        return bool(self.test(*(values[n] for n in self.names)))


#: a percentile in percent, [0, 100]
Percentile = Annotated[float, Interval(0, 100, note="a percentile, in percent")]
#: a percentile in percent below 100, [0, 100)
PercentileBelow100 = Annotated[float, Interval(0, 100, "left", note="a percentile, in percent")]
#: a number > 0
Positive = Annotated[float, Interval(0, None, "neither")]
#: a number >= 0
NonNegative = Annotated[float, Interval(0, None, "both")]
#: a finite number
FiniteFloat = Annotated[float, Finite()]
#: a random seed (numpy's generators take integers >= 0)
Seed = Annotated[int, Integer(min=0, note="a random seed")]
#: a number of rows per batch
BatchSize = Annotated[int, Integer(min=1)]
#: True or False
Bool = Annotated[bool, Flag()]


@dataclass(frozen=True)
class Declared:
    """One declared field: its name, constraint, Python type (as written), whether ``None`` is
    accepted, and its default."""

    name: str
    constraint: Constraint
    type: str
    optional: bool
    default: Any

    def problem(self, value: Any) -> str | None:
        """``None`` when ``value`` is valid, else the phrase it fails."""
        if value is None:
            return None if self.optional else self.constraint.describe()
        return self.constraint.problem(value)

    def describe(self) -> str:
        """The accepted values, ``None`` included when the type admits it."""
        text = self.constraint.describe()
        return f"{text}, or None" if self.optional and "None" not in text else text


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(hint))
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else (
        str(hint).replace("typing.", ""))


def _fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.init]


@functools.cache
def declarations(cls: type) -> dict[str, Declared]:
    """The declared fields of dataclass ``cls`` (those whose annotation carries a
    :class:`Constraint`), by name, in field order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, Declared] = {}
    for f in _fields(cls):
        hint = hints.get(f.name)
        if typing.get_origin(hint) is not Annotated:
            continue
        inner, *extras = typing.get_args(hint)
        found = [e for e in extras if isinstance(e, Constraint)]
        if not found:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        optional = type(None) in typing.get_args(inner)
        out[f.name] = Declared(f.name, found[0], _type_name(inner), optional, default)
    return out


def undeclared(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` that declare no constraint."""
    declared = declarations(cls)
    return tuple(f.name for f in _fields(cls) if f.name not in declared)


def field_error(who: str, name: str, value: Any, declared: Declared) -> InvalidInputError | None:
    """The uniform error for ``value`` of field ``name`` (``None`` when it is valid)."""
    phrase = declared.problem(value)
    if phrase is None:
        return None
    wrong_type = phrase in ("an integer", "a number")
    note = f" ({declared.constraint.note})" if declared.constraint.note and not wrong_type else ""
    got = f"{value!r}"
    if wrong_type:
        got += f" ({type(value).__name__})"
    if phrase == "an integer" and is_number(value):
        got += f"; write it without a decimal point, e.g. {name}={round(float(value))}"
    if isinstance(declared.constraint, Options) and isinstance(value, str):
        words = [v for v in declared.constraint.values if isinstance(v, str)]
        close = difflib.get_close_matches(value, words, n=1)
        got += f"; did you mean {close[0]!r}?" if close else ""
    return InvalidInputError(f"{who}: {name} must be {phrase}{note}; got {got}")


def check_error(who: str, check: Check, values: Mapping[str, Any]) -> InvalidInputError | None:
    """The uniform error when ``check`` fails for ``values`` (``None`` when it holds)."""
    if check.holds(values):
        return None
    got = ", ".join(f"{n}={values[n]!r}" for n in check.names)
    return InvalidInputError(f"{who}: needs {check.requirement}; got {got}")


def validate(who: str, declared: Mapping[str, Declared], checks: Iterable[Check],
             values: Mapping[str, Any]) -> None:
    """Raise the first uniform ``InvalidInputError`` of ``values`` against the declarations
    (each field, then each check between fields); ``who`` starts the message."""
    for name, decl in declared.items():
        if name in values:
            error = field_error(who, name, values[name], decl)
            if error is not None:
                raise error
    for check in checks:
        if all(n in values for n in check.names):
            error = check_error(who, check, values)
            if error is not None:
                raise error


def unknown_names(who: str, names: Iterable[str], valid: Iterable[str],
                  noun: str = "hyper-parameter") -> str | None:
    """A one-line explanation of the names not in ``valid`` (with the closest valid names), or
    ``None`` when there are none; ``noun`` is what the names are (a loss's ``"option"``)."""
    valid = sorted(valid)
    wrong = sorted(set(names) - set(valid))
    if not wrong:
        return None
    close = [c for w in wrong for c in difflib.get_close_matches(w, valid, n=1, cutoff=0.6)]
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (f"{who} has no {noun} {', '.join(wrong)}; it takes "
            f"{', '.join(valid) or 'none'}{hint}")


def described(declared: Mapping[str, Declared], checks: Iterable[Check]) -> dict[str, Any]:
    """What a listing shows of declarations: ``ranges`` (each field's valid values, as
    :meth:`Declared.describe` words them) and ``checks`` (each check's requirement)."""
    return {"ranges": {name: d.describe() for name, d in declared.items()},
            "checks": [c.requirement for c in checks]}


class DeclaredFields:
    """Base of a dataclass whose fields declare their valid values (``Annotated``) and whose
    ``checks`` relate them: ``__post_init__`` validates them all, once, with the uniform message
    (:func:`validate`, starting with :meth:`declared_by`), then calls :meth:`_settle`.

    The class declares, it does not check: a subclass needing derived state (a normalised
    value, a sub-module) overrides :meth:`_settle`, which runs on validated values."""

    checks: ClassVar[tuple[Check, ...]] = ()

    def declared_by(self) -> str:
        """How the uniform message names the object (``"loss 'oe'"``)."""
        return type(self).__name__

    def __post_init__(self) -> None:
        cls: type = type(self)
        declared = declarations(cls)
        validate(self.declared_by(), declared, self.checks,
                 {name: getattr(self, name) for name in declared})
        self._settle()

    def _settle(self) -> None:
        """Derived state from the validated fields (nothing by default)."""
