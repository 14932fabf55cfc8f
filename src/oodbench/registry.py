"""Registries of named classes (detectors, losses): a class decorator adds one, a name finds it."""

from __future__ import annotations

from typing import Any, TypeVar

from oodbench.errors import UnknownNameError

C = TypeVar("C")


class Registry(dict[str, type[C]]):
    """The classes of one kind (``"detector"``, ``"loss"``) under their ``name`` attribute: a
    dict of name -> class that checks what is added and explains a name it lacks."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def add(self, cls: type[C]) -> None:
        """Register ``cls`` under ``cls.name`` (``TypeError`` for a missing or taken name)."""
        name: str = getattr(cls, "name", "")
        if not name:
            raise TypeError(f"{cls.__name__} must set the class attribute 'name'")
        if self.get(name, cls) is not cls:
            raise TypeError(f"{self.kind} name {name!r} registered twice")
        self[name] = cls

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
