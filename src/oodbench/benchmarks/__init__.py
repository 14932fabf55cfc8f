"""Named benchmarks: the C-OOD severity benchmark and the standard near/far OOD benchmarks.

    from oodbench import benchmarks
    benchmarks.available()                       # {name: description}
    bench = benchmarks.get("openood-v1.5-imagenet", root="/data/openood")
    table = bench.run(model, [create("msp"), create("energy")])

    benchmarks.get("cood", id_test=..., ood_pool=...)      # oodbench.benchmarks.cood
    benchmarks.from_toml("my_benchmark.toml")              # a custom benchmark (see .files)

The standard benchmarks are data (``benchmarks/specs/*.toml``): which image lists or folders
form the ID test set and each OOD group, which metrics to headline, how to aggregate. Every
named benchmark is built by a benchmark kind (:data:`KINDS`, :meth:`BenchmarkKind.named`), so
``get`` finds a name the way an experiment's ``[[benchmarks]]`` entry finds its ``type``.

This package is light: importing it loads no detector or extraction code; ``Benchmark``,
``OodSetsBenchmark`` and ``BenchmarkFile`` are imported on first use.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oodbench.benchmarks.kinds import KINDS, BenchmarkKind, named_benchmarks, register
from oodbench.errors import UnknownNameError

if TYPE_CHECKING:
    from oodbench.benchmarks.base import Benchmark
    from oodbench.benchmarks.files import BenchmarkFile
    from oodbench.benchmarks.standard import OodSetsBenchmark

__all__ = [
    "KINDS",
    "Benchmark",
    "BenchmarkKind",
    "BenchmarkFile",
    "OodSetsBenchmark",
    "available",
    "from_spec",
    "from_toml",
    "get",
    "register",
    "spec",
]

#: names exported from the modules that define them, imported on first use
_LAZY = {
    "Benchmark": "oodbench.benchmarks.base",
    "BenchmarkFile": "oodbench.benchmarks.files",
    "OodSetsBenchmark": "oodbench.benchmarks.standard",
}


def __getattr__(name: str) -> Any:
    """``Benchmark``, ``BenchmarkFile``, ``OodSetsBenchmark`` from their modules."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def available() -> dict[str, str]:
    """Every named benchmark: name -> one-line description (``oodbench list benchmarks``)."""
    return {name: text for kind in KINDS.values() for name, text in kind.named().items()}


def spec(name: str) -> BenchmarkFile:
    """The validated benchmark file of a built-in standard benchmark (no data needed)."""
    from oodbench.benchmarks.files import builtin

    return builtin(name)


def get(name: str, **options: Any) -> Benchmark:
    """Build the named benchmark, by the kind that names it (:meth:`BenchmarkKind.get`).

    ``"cood"``: ``options`` go to :class:`oodbench.benchmarks.cood.CoodBenchmark`.
    A standard benchmark: ``root`` (its data folder) and/or ``paths`` (per set: a folder, a
    Source or Activations); see :func:`oodbench.benchmarks.files.build`.
    Unknown names raise ``UnknownNameError`` with the closest names.
    """
    owners = named_benchmarks()
    if name not in owners:
        raise UnknownNameError("benchmark", name, owners)
    return owners[name].get(name, **options)


def from_spec(spec: BenchmarkFile | Mapping[str, Any], **options: Any) -> OodSetsBenchmark:
    """A benchmark from a benchmark file's dict (as read from TOML) or a :class:`BenchmarkFile`."""
    from oodbench.benchmarks.files import BenchmarkFile, build_with_options, parse_spec

    parsed = spec if isinstance(spec, BenchmarkFile) else parse_spec(spec)
    return build_with_options(parsed, options, base_dir=None)


def from_toml(path: str | os.PathLike[str], **options: Any) -> OodSetsBenchmark:
    """A custom benchmark from a TOML spec; its relative ``root`` is taken from the file's folder.

    Without a ``root`` (in the file or in ``options``) the spec's paths are relative to the
    folder of the TOML file.
    """
    from oodbench.benchmarks.files import build_with_options, read_file

    path = Path(path).expanduser()
    parsed = read_file(path)
    if parsed.root is None and "root" not in options:
        options = {**options, "root": path.parent}
    return build_with_options(parsed, options, base_dir=path.parent)
