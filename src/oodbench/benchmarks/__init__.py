"""Named benchmarks: the C-OOD severity benchmark and the standard near/far OOD benchmarks.

    from oodbench import benchmarks
    benchmarks.available()                       # {name: description}
    bench = benchmarks.get("openood-v1.5-imagenet", root="/data/openood")
    table = bench.run(model, [create("msp"), create("energy")])

    benchmarks.get("cood", id_test=..., ood_pool=...)      # oodbench.benchmarks.cood
    benchmarks.from_toml("my_benchmark.toml")              # a custom benchmark (see .spec)

The standard benchmarks are data (``benchmarks/specs/*.toml``): which image lists or folders
form the ID test set and each OOD group, which metrics to headline, how to aggregate.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oodbench.benchmarks.base import Benchmark
from oodbench.benchmarks.kinds import KINDS, BenchmarkKind, register
from oodbench.benchmarks.kinds import cood as _cood_kind  # noqa: F401  (the built-in kinds)
from oodbench.benchmarks.kinds import custom as _custom_kind  # noqa: F401
from oodbench.benchmarks.kinds import standard as _standard_kind  # noqa: F401
from oodbench.benchmarks.spec import (
    BenchmarkFile,
    build_with_options,
    builtin,
    builtin_paths,
    parse_spec,
    read_file,
)
from oodbench.benchmarks.standard import OodSetsBenchmark

COOD_DESCRIPTION = (
    "C-OOD severity benchmark (Galil, Dabbah & El-Yaniv, ICLR 2023): OOD classes from "
    "ImageNet-21k graded into severity levels per model and detector; build with "
    "get('cood', id_test=..., ood_pool=...)"
)

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


def available() -> dict[str, str]:
    """Every named benchmark: name -> one-line description (``oodbench list benchmarks``)."""
    out = {"cood": COOD_DESCRIPTION}
    out.update({name: builtin(name).description for name in builtin_paths()})
    return out


def spec(name: str) -> BenchmarkFile:
    """The validated benchmark file of a built-in standard benchmark (no data needed)."""
    return builtin(name)


def get(name: str, **options: Any) -> Benchmark:
    """Build the named benchmark.

    ``"cood"``: ``options`` go to :class:`oodbench.benchmarks.cood.CoodBenchmark`.
    A standard benchmark: ``root`` (its data folder) and/or ``paths`` (per set: a folder, a
    Source or Activations); see :func:`oodbench.benchmarks.spec.build`.
    Unknown names raise ``UnknownNameError`` with the closest names.
    """
    if name == "cood":
        from oodbench.benchmarks.cood import CoodBenchmark

        return CoodBenchmark(**options)
    return build_with_options(builtin(name), options, base_dir=None)


def from_spec(spec: BenchmarkFile | Mapping[str, Any], **options: Any) -> OodSetsBenchmark:
    """A benchmark from a benchmark file's dict (as read from TOML) or a :class:`BenchmarkFile`."""
    parsed = spec if isinstance(spec, BenchmarkFile) else parse_spec(spec)
    return build_with_options(parsed, options, base_dir=None)


def from_toml(path: str | os.PathLike[str], **options: Any) -> OodSetsBenchmark:
    """A custom benchmark from a TOML spec; its relative ``root`` is taken from the file's folder.

    Without a ``root`` (in the file or in ``options``) the spec's paths are relative to the
    folder of the TOML file.
    """
    path = Path(path).expanduser()
    parsed = read_file(path)
    if parsed.root is None and "root" not in options:
        options = {**options, "root": path.parent}
    return build_with_options(parsed, options, base_dir=path.parent)
