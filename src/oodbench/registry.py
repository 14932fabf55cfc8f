"""Registries: every extension point of oodbench is a :class:`Registry` of named entries.

One protocol for every kind (detectors, losses, training methods, benchmark kinds, tuning
protocols, model families, datasets, published tables): an *entry* is an object (usually a
class) with

* ``name``: how it is found (``Registry.lookup(name)``; an unknown name gets the closest ones);
* ``settings``: the schema of its settings (a :class:`~oodbench.schema.Schema` class, or the
  entry's own declared fields: :func:`settings_of`);
* ``needs``: what it asks of the run (declared data, checked on :meth:`Registry.add` against
  the kind's allowed values);
* its behaviour: the methods of its kind (``Detector.score``, ``BenchmarkKind.build``,
  ``ModelFamily.load``, ...).

A registry knows the package that holds its built-in entries (``builtins``: one file per entry,
as ``oodbench/detectors/``, ``oodbench/tuning/protocols/``) and imports every public module of
it on first read, never when it is created: declaring a registry, or importing a schema that
refers to one, loads no implementation. A new entry is one file that registers it (``@register`` or
``REGISTRY.add(entry)``); ``oodbench list <kind>`` reads :data:`KINDS` and shows every entry
of every registry through :func:`describe`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from oodbench.errors import UnknownNameError

E = TypeVar("E")
T = TypeVar("T")

_MISSING = object()


class Registry(dict[str, E]):
    """The entries of one kind (``"detector"``, ``"loss"``) under their ``name`` attribute: a
    dict of name -> entry that checks what is added, loads its built-in entries on first read
    and explains a name it lacks."""

    def __init__(self, kind: str, *, declares: tuple[str, frozenset[str]] | None = None,
                 undeclared: Callable[[Any], Iterable[str]] | None = None,
                 builtins: str = "") -> None:
        """``declares``: ``(attribute, allowed values)``, a set-valued attribute every entry
        declares (a detector's ``requires``, a benchmark kind's ``needs``), checked on
        :meth:`add`. ``undeclared``: the settings of an entry that declare no valid values
        (``oodbench.constraints.undeclared``); an entry with any is refused. ``builtins``: the
        package whose public modules (names without a leading underscore) register the built-in
        entries, each imported (in name order) on first read."""
        super().__init__()
        self.kind = kind
        self.declares = declares
        self.undeclared = undeclared
        self.builtins = builtins
        self._loaded = not builtins

    def load_builtins(self) -> None:
        """Import the modules of the built-in entries (once; each registers its own)."""
        if not self._loaded:
            self._loaded = True
            package = importlib.import_module(self.builtins)
            for found in pkgutil.iter_modules(package.__path__):
                if not found.name.startswith("_"):
                    importlib.import_module(f"{self.builtins}.{found.name}")

    def add(self, entry: Any) -> None:
        """Register ``entry`` under ``entry.name`` (``TypeError`` for a missing or taken name,
        or for a declaration outside the kind's allowed values)."""
        name: str = getattr(entry, "name", "")
        label = getattr(entry, "__name__", repr(entry))
        if not name:
            raise TypeError(f"{label} must set the attribute 'name'")
        if dict.get(self, name, entry) is not entry:
            raise TypeError(f"{self.kind} name {name!r} registered twice")
        if self.declares is not None:
            attribute, allowed = self.declares
            unknown = set(getattr(entry, attribute)) - allowed
            if unknown:
                raise TypeError(f"{label}.{attribute}: unknown {sorted(unknown)}; use "
                                f"{sorted(allowed)}")
        missing = list(self.undeclared(entry)) if self.undeclared is not None else []
        if missing:
            raise TypeError(
                f"{label}: {', '.join(missing)} declare no valid values; annotate each "
                "field with its constraint, e.g. Annotated[float, Interval(0, 1)] or Percentile "
                "(oodbench.constraints)")
        dict.__setitem__(self, name, entry)

    def register(self, entry: T) -> T:
        """Class decorator: :meth:`add` ``entry`` and return it."""
        self.add(entry)
        return entry

    def lookup(self, name: str) -> E:
        """The entry registered as ``name`` (``UnknownNameError`` with the closest names)."""
        try:
            return self[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self) from None

    # reads load the built-in entries first
    def __getitem__(self, name: str) -> E:
        self.load_builtins()
        return dict.__getitem__(self, name)

    def __contains__(self, name: object) -> bool:
        self.load_builtins()
        return dict.__contains__(self, name)

    def __iter__(self) -> Iterator[str]:
        self.load_builtins()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_builtins()
        return dict.__len__(self)

    def get(self, name: str, default: Any = None) -> Any:
        self.load_builtins()
        return dict.get(self, name, default)

    def keys(self) -> Any:
        self.load_builtins()
        return dict.keys(self)

    def values(self) -> Any:
        self.load_builtins()
        return dict.values(self)

    def items(self) -> Any:
        self.load_builtins()
        return dict.items(self)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self)})"


def summary(entry: Any) -> str:
    """The first line of an entry's description or docstring ('' without one), for listings."""
    text = getattr(entry, "description", None)
    if not isinstance(text, str) or not text:
        text = entry.__doc__ if isinstance(entry, type) else ""
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def settings_of(entry: Any) -> list[str]:
    """The names of an entry's settings: the keys it names (``table_keys()``), the fields of
    its ``settings`` schema (a pydantic model), or the names it lists there, or a benchmark kind's table schema (``entry``); none
    otherwise (a detector's hyper-parameters and a loss's options have listings of their own:
    ``oodbench list detectors`` / ``losses``)."""
    listed = getattr(entry, "table_keys", None)
    if callable(listed):  # an entry that names its settings' keys (a tuning protocol)
        return [str(k) for k in listed()]
    schema = getattr(entry, "settings", None)
    if isinstance(schema, (tuple, list)):
        return [str(k) for k in schema]
    skip: set[str] = set()
    if schema is None and hasattr(entry, "entry"):  # a benchmark kind: its table's schema
        schema, skip = entry.entry, {"type"}  # (the type is the kind's name)
    fields = getattr(schema, "model_fields", None)
    if fields is not None:
        return [str(k) for k in fields if k not in skip]
    return []


def needs_of(entry: Any) -> list[str]:
    """What an entry declares it needs (``needs``, or a detector's ``requires``), sorted."""
    for attribute in ("needs", "requires"):
        value = getattr(entry, attribute, _MISSING)
        if value is not _MISSING and not callable(value):
            if isinstance(value, bool):
                return [attribute] if value else []
            return sorted(str(v) for v in value) if isinstance(value, Iterable) else [str(value)]
    return []


def describe(entry: Any) -> dict[str, str]:
    """One listing row of any registry's entry: name, needs, settings, description."""
    return {"name": str(entry.name), "needs": ", ".join(needs_of(entry)),
            "settings": ", ".join(settings_of(entry)), "description": summary(entry)}
