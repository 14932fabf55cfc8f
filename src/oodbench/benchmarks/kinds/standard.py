"""``type = "standard"``: a named benchmark of ``benchmarks/specs/*.toml`` (it has its own ID set)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, StrictStr, ValidationInfo, field_validator

from oodbench.benchmarks.kinds import (
    BenchmarkEntry,
    BenchmarkKind,
    KindInputs,
    named_benchmarks,
    register,
)
from oodbench.errors import UnknownNameError
from oodbench.schema import context_of

if TYPE_CHECKING:
    from oodbench.benchmarks.base import Benchmark


class StandardSpec(BenchmarkEntry):
    """A named benchmark from ``oodbench.benchmarks.get(name, **options)`` (it has its own ID set).

    ``options.root`` and the folders in ``options.paths`` are resolved against the experiment
    file's folder when relative.
    """

    type: Literal["standard"] = "standard"
    name: StrictStr = Field(description="a name from `oodbench list benchmarks`")
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        owners = named_benchmarks()
        owner = owners.get(name)
        if owner is None:
            raise ValueError(str(UnknownNameError("benchmark", name, owners)))
        if owner is not StandardKind:
            raise ValueError(f"the {name} benchmark is type = \"{owner.name}\"{owner.table_hint}")
        return name

    @field_validator("options")
    @classmethod
    def _resolve_paths(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        base = Path(context_of(info).get("base_dir", Path.cwd()))

        def resolve(value: str) -> str:
            path = Path(value).expanduser()
            return str(path if path.is_absolute() else (base / path).resolve())

        options = dict(options)
        if isinstance(options.get("root"), str):  # data folders relative to this file
            options["root"] = resolve(options["root"])
        if isinstance(options.get("paths"), Mapping):
            options["paths"] = {k: resolve(v) if isinstance(v, str) else v
                                for k, v in options["paths"].items()}
        return options

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "options": dict(self.options),
                **self.intervals()}


@register
class StandardKind(BenchmarkKind):
    """A built-in near / far OOD benchmark (OpenOOD v1.5, MOS), read from its spec file."""

    name = "standard"
    entry = StandardSpec
    table_hint = " with a name from `oodbench list benchmarks`"

    @classmethod
    def named(cls) -> dict[str, str]:
        from oodbench.benchmarks.files import builtin, builtin_paths

        return {name: builtin(name).description for name in builtin_paths()}

    @classmethod
    def get(cls, name: str, **options: Any) -> Benchmark:
        """A standard benchmark: ``root`` (its data folder) and/or ``paths`` (per set: a folder,
        a Source or Activations); see :func:`oodbench.benchmarks.files.build`."""
        from oodbench.benchmarks.files import build_with_options, builtin

        return build_with_options(builtin(name), options, base_dir=None)

    @classmethod
    def build(cls, entry: StandardSpec, inputs: KindInputs) -> Benchmark:
        return cls.get(entry.name, **entry.options)
