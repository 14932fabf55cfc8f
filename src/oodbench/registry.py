"""Registries of named classes (detectors, losses): a class decorator adds one, a name finds it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from oodbench.errors import UnknownNameError

C = TypeVar("C")
T = TypeVar("T", bound=type)


class Registry(dict[str, type[C]]):
    """The classes of one kind (``"detector"``, ``"loss"``) under their ``name`` attribute: a
    dict of name -> class that checks what is added and explains a name it lacks."""

    def __init__(self, kind: str, *, declares: tuple[str, frozenset[str]] | None = None,
                 undeclared: Callable[[type], Iterable[str]] | None = None) -> None:
        """``declares``: ``(attribute, allowed values)``, a set-valued class attribute every
        entry declares (a detector's ``requires``, a benchmark kind's ``needs``), checked on
        :meth:`add`. ``undeclared``: the settings of an entry that declare no valid values
        (``oodbench.constraints.undeclared``); an entry with any is refused."""
        super().__init__()
        self.kind = kind
        self.declares = declares
        self.undeclared = undeclared

    def add(self, cls: type[C]) -> None:
        """Register ``cls`` under ``cls.name`` (``TypeError`` for a missing or taken name)."""
        name: str = getattr(cls, "name", "")
        if not name:
            raise TypeError(f"{cls.__name__} must set the class attribute 'name'")
        if self.get(name, cls) is not cls:
            raise TypeError(f"{self.kind} name {name!r} registered twice")
        if self.declares is not None:
            attribute, allowed = self.declares
            unknown = set(getattr(cls, attribute)) - allowed
            if unknown:
                raise TypeError(f"{cls.__name__}.{attribute}: unknown {sorted(unknown)}; use "
                                f"{sorted(allowed)}")
        missing = list(self.undeclared(cls)) if self.undeclared is not None else []
        if missing:
            raise TypeError(
                f"{cls.__name__}: {', '.join(missing)} declare no valid values; annotate each "
                "field with its constraint, e.g. Annotated[float, Interval(0, 1)] or Percentile "
                "(oodbench.constraints)")
        self[name] = cls

    def register(self, cls: T) -> T:
        """Class decorator: :meth:`add` ``cls`` and return it."""
        self.add(cls)
        return cls

    def lookup(self, name: str) -> type[C]:
        """The class registered as ``name`` (``UnknownNameError`` with the closest names)."""
        try:
            return self[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self) from None


def summary(cls: Any) -> str:
    """The first line of a class's docstring ('' without one), for listings."""
    lines = (cls.__doc__ or "").strip().splitlines()
    return lines[0] if lines else ""
