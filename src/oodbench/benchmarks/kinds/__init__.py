"""Benchmark kinds: what a ``[[benchmarks]]`` entry of an experiment may be, as registry entries.

A kind is a :class:`BenchmarkKind` subclass registered in :data:`KINDS` (one file,
``@register``) under the ``type`` an entry gives. It declares

* ``entry``: the schema of its ``[[benchmarks]]`` table (a :class:`BenchmarkEntry`: data only,
  with ``describe()`` for cell keys and ``sources()`` for the up-front path checks);
* ``needs``: what the experiment must provide: ``"id_test"`` (``[id] test``), ``"fit"``
  (``[id] fit``), ``"id_val"`` (``[id] val``), ``"features"`` (captured by every extraction);

and how it runs: :meth:`BenchmarkKind.build` turns a validated entry, given the inputs the
runner built (:class:`KindInputs`), into a :class:`~oodbench.benchmarks.base.Benchmark`, whose
``run`` evaluates detectors. Built in: ``cood`` (:mod:`.cood`), ``standard``
(:mod:`.standard`), ``custom`` (:mod:`.custom`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import GetCoreSchemaHandler, StrictBool, StrictInt, StrictStr, field_validator
from pydantic_core import core_schema

from oodbench.data.spec import SourceSpec
from oodbench.errors import UnknownNameError
from oodbench.registry import Registry
from oodbench.schema import Schema

if TYPE_CHECKING:  # the entries' schemas load no benchmark code
    from oodbench.benchmarks.base import Benchmark
    from oodbench.data.source import Source

#: what an OOD group of a near / far benchmark may be
GROUP_KINDS = ("near", "far")

#: what a kind may need from the experiment
NEEDS = frozenset({"id_test", "fit", "id_val", "features"})


class BenchmarkEntry(Schema):
    """Base of every ``[[benchmarks]]`` table: its ``type`` and ``name``, and confidence
    intervals on every row.

    ``ci``: DeLong's 95 % interval of AUROC (cheap, on by default); ``n_bootstrap``: that many
    seeded bootstrap replicates for FPR@95 and AUPR intervals (0 = off; it costs about
    ``n_bootstrap`` times the metric, see studies/ci_coverage.py).
    """

    type: StrictStr
    name: StrictStr
    ci: StrictBool = True
    n_bootstrap: StrictInt = 0

    @field_validator("n_bootstrap")
    @classmethod
    def _replicates(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be 0 (off) or a number of replicates such as 1000; got {value}")
        return value

    def intervals(self) -> dict[str, Any]:
        """The options for ``describe`` (and so the cell keys), only when not the defaults."""
        if self.ci and not self.n_bootstrap:
            return {}
        return {"intervals": {"ci": self.ci, "n_bootstrap": self.n_bootstrap}}

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        """The entry's own image sources, with where they stand in the file."""
        return iter(())

    def describe(self) -> dict[str, Any]:
        """A JSON-able description (part of every cell key of this benchmark)."""
        return {"type": self.type, "name": self.name, **self.intervals()}


@dataclass(frozen=True)
class KindInputs:
    """What the runner hands :meth:`BenchmarkKind.build`: the experiment's ID test source
    (``None`` unless the kind needs ``"id_test"``) and a function that builds a source entry."""

    id_test: Source | None
    source: Callable[[SourceSpec], Source]


class BenchmarkKind:
    """Base of every benchmark kind (see the module docstring)."""

    name: ClassVar[str] = ""
    entry: ClassVar[type[BenchmarkEntry]] = BenchmarkEntry
    needs: ClassVar[frozenset[str]] = frozenset()
    #: what else a ``[[benchmarks]]`` table of this type holds, for messages (" with a pool")
    table_hint: ClassVar[str] = ""

    @classmethod
    def named(cls) -> dict[str, str]:
        """The benchmarks this kind builds by name (``oodbench.benchmarks.get(name)``,
        ``oodbench list benchmarks``): name -> one-line description (default: none)."""
        return {}

    @classmethod
    def get(cls, name: str, **options: Any) -> Benchmark:
        """The named benchmark ``name`` (a key of :meth:`named`) built from ``options``."""
        raise NotImplementedError

    @classmethod
    def build(cls, entry: Any, inputs: KindInputs) -> Benchmark:
        """The benchmark ``entry`` describes, without interval options (the runner sets them)."""
        raise NotImplementedError


#: every benchmark kind, by ``type``
KINDS: Registry[type[BenchmarkKind]] = Registry(
    "benchmark type", declares=("needs", NEEDS),
    builtins=__name__)  # this package: one file per kind, loaded on first read
#: class decorator: add a benchmark kind to :data:`KINDS`
register = KINDS.register


def named_benchmarks() -> dict[str, type[BenchmarkKind]]:
    """Every named benchmark, in kind order: name -> the kind that builds it."""
    return {name: kind for kind in KINDS.values() for name in kind.named()}


def kind_of(entry: BenchmarkEntry) -> type[BenchmarkKind]:
    """The registered kind of a validated entry."""
    return KINDS[entry.type]


def with_intervals(bench: Benchmark, entry: BenchmarkEntry) -> Benchmark:
    """``bench`` with the entry's interval options set."""
    bench.ci, bench.n_bootstrap = entry.ci, entry.n_bootstrap
    return bench


def _validate_entry(value: Any, info: core_schema.ValidationInfo) -> BenchmarkEntry:
    if isinstance(value, BenchmarkEntry):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table ({{ key = value }}), got {value!r}")
    kind = value.get("type")
    if kind is None:
        raise ValueError(f"missing required key 'type' (benchmark type; one of {', '.join(KINDS)})")
    try:
        cls = KINDS.lookup(str(kind))
    except UnknownNameError as err:
        raise ValueError(str(err)) from None
    return cls.entry.model_validate(value, context=info.context)


class AnyBenchmarkEntry:
    """Pydantic type of a ``[[benchmarks]]`` entry: validated by the schema of the kind its
    ``type`` names (looked up in :data:`KINDS` at validation time, so kinds registered later
    count)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.with_info_plain_validator_function(_validate_entry)
