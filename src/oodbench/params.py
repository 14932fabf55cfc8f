"""Frozen mappings for the nested fields of a result: hyper-parameters, a tuning record, the
package versions.

    p = Params({"k": 5, "fit_data": "train"})
    p["k"], dict(p), p == {"k": 5, "fit_data": "train"}     # a read-only mapping
    {p: 1}; df.groupby("hyperparams")                         # hashable: a DataFrame key

A detector's hyper-parameters differ in keys and types from one detector to the next, so the
results table holds them, its tuning records and its package versions as :class:`Params`
values: typed (``5`` stays an int, ``0.5`` a float, ``True`` a bool), comparable with any
mapping, hashable (pandas can group, pivot and deduplicate on them) and ordered by their
canonical text (sorting keeps the order of the JSON strings the table held before).

:func:`params` builds one from a mapping, from ``None`` / an empty value (an empty ``Params``)
or from JSON text (a file written by an older oodbench, a CSV of benchmark rows, a published
table's ``hyperparams`` column): this module is the only place that encodes or decodes that
text (:func:`to_text`, :func:`from_text`), for files; nothing above it passes JSON around.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["FrozenList", "Params", "canonical", "from_text", "params", "plain", "to_text"]


def _freeze(value: Any) -> Any:
    """A hashable, typed copy: mappings become ``Params``, lists and tuples tuples, numpy
    scalars Python ones; other objects (a ``Path``) their text, as the JSON encoder did."""
    if isinstance(value, Params):
        return value
    if isinstance(value, Mapping):
        return Params(value)
    if isinstance(value, (list, tuple)):
        return FrozenList(_freeze(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item) and getattr(value, "shape", None) == ():
        return _freeze(item())
    return str(value)


def plain(value: Any) -> Any:
    """``value`` with every ``Params`` as a ``dict`` and every tuple as a list (JSON's types)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class FrozenList(tuple[Any, ...]):
    """A list inside ``Params``: a tuple (hashable, read-only) that is equal to the list with
    the same items and prints like one."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return list(self) == other
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return repr(list(self))


class Params(Mapping[str, Any]):
    """A read-only, hashable mapping with its keys sorted; nested mappings are ``Params`` too,
    lists and tuples :class:`FrozenList`. Equal to any mapping with the same items of the same
    types."""

    __slots__ = ("_data", "_hash", "_text")

    def __init__(self, items: Mapping[str, Any] | None = None, /, **kwargs: Any):
        merged = {**(dict(items) if items is not None else {}), **kwargs}
        self._data = {str(k): _freeze(merged[k]) for k in sorted(merged, key=str)}
        self._hash: int | None = None
        self._text: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.text)
        return self._hash

    def __eq__(self, other: object) -> bool:
        """Equal when the canonical texts are (``5`` is not ``5.0``, as in the JSON before)."""
        if isinstance(other, Mapping):
            return self.text == to_text(other)
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Params):
            return NotImplemented
        return self.text < other.text

    def __repr__(self) -> str:
        return f"Params({plain(self)!r})"

    def __str__(self) -> str:
        """The canonical JSON text (what the column held as a string before: ``astype(str)``
        and ``to_csv`` write it, and :func:`params` reads it back)."""
        return self.text

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (Ray) as its plain dict
        return (Params, (plain(self),))

    @property
    def text(self) -> str:
        """The canonical JSON text (sorted keys): the sort key, and what a file stores."""
        if self._text is None:
            self._text = canonical(self)
        return self._text


def canonical(value: Any) -> str:
    """The canonical text of any value (JSON, sorted keys): equal exactly when two values are
    (``5`` is not ``5.0``, ``1`` is not ``True``)."""
    return json.dumps(plain(_freeze(value)), sort_keys=True, default=str)


def to_text(value: Mapping[str, Any]) -> str:
    """The canonical JSON text of a mapping (sorted keys), as files store it."""
    return value.text if isinstance(value, Params) else params(value).text


def from_text(text: str) -> Params:
    """The ``Params`` of JSON text; empty text is an empty ``Params``."""
    if not text:
        return Params()
    value = json.loads(text)
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a JSON object, got {text[:80]!r}")
    return Params(value)


def params(value: Any) -> Params:
    """``value`` as ``Params``: a mapping, JSON text, or ``None`` / NaN / ``""`` / ``pd.NA``
    (empty)."""
    if isinstance(value, Params):
        return value
    if isinstance(value, Mapping):
        return Params(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Params()
    if isinstance(value, str):
        return from_text(value)
    if type(value).__name__ == "NAType":  # pandas' NA, without importing pandas here
        return Params()
    raise TypeError(f"expected a mapping or JSON text, got {type(value).__name__}: {value!r}")
