"""``oodbench list <registry>``: every registry of extension points, one row per entry."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import click
import pandas as pd

from oodbench.cli.tables import aside, show, table_options
from oodbench.registry import Registry, describe

#: every registry ``oodbench list`` shows beyond detectors, losses, model families and named
#: benchmarks (which have columns of their own): the word -> (``"module:attribute"`` of the
#: registry, or of a function returning it; the title); each is imported only when listed
REGISTRIES: dict[str, tuple[str, str]] = {
    "benchmark-types": ("oodbench.benchmarks.kinds:KINDS",
                        "benchmark types (type = ... of a [[benchmarks]] entry)"),
    "protocols": ("oodbench.tuning.protocol:PROTOCOLS",
                  "tuning protocols (tune = { protocol = ... } of a [[detectors]] entry)"),
    "methods": ("oodbench.train.method_registry:METHODS",
                "training methods (each loss names one: oodbench list losses)"),
    "datasets": ("oodbench.data.catalog:datasets", "datasets (oodbench data info NAME)"),
    "table-loaders": ("oodbench.published.catalogue:LOADERS",
                      "published-table loaders (loader = ... of a catalogue entry)"),
}

#: every word ``oodbench list`` takes
KINDS = ("detectors", "models", "benchmarks", "losses", *REGISTRIES)


@click.command("list")
@click.argument("what", type=click.Choice(KINDS))
@table_options
def list_cmd(what: str, fmt: str | None, wide: bool) -> None:
    """List a registry: detectors, model families, named benchmarks, training losses, benchmark
    types, tuning protocols, training methods, datasets or published-table loaders."""
    if what == "detectors":
        from oodbench import detectors

        show(_registry_frame(detectors.available(), {
            "needs": lambda row: ", ".join(row["requires"]),
            "fits on": lambda row: row["defaults"].get("fit_data", ""),
            "presets": _presets,
            "valid values": _valid_values,
        }), fmt, title="detectors (score: higher = more in-distribution)", key=("name",),
            drop_first=("paper", "valid values", "defaults"), wide=wide)
    elif what == "losses":
        from oodbench import losses

        show(_registry_frame(losses.available(), {
            "needs outliers": lambda row: "yes" if row["needs_outliers"] else "",
            "valid values": _valid_values,
        }), fmt, title="training losses (oodbench train, oodbench.train)", key=("name",),
            drop_first=("paper", "valid values", "defaults"), wide=wide)
    elif what == "models":
        from oodbench.models.registry import FAMILIES

        specs = pd.DataFrame([(f.syntax, f.description) for f in FAMILIES.values()],
                             columns=["spec", "description"])
        show(specs, fmt, title="model specs for oodbench.models.load(spec) and --model",
             key=("spec",), wide=wide)
        aside("any nn.Module: oodbench.models.wrap(module, feature_layer=..., head_layer=...)",
              fmt)
    elif what == "benchmarks":
        from oodbench.benchmarks.kinds import KINDS as BENCHMARK_KINDS

        named = pd.DataFrame([(name, kind.name, text) for kind in BENCHMARK_KINDS.values()
                              for name, text in kind.named().items()],
                             columns=["name", "type", "description"])
        show(named, fmt, title="benchmarks", key=("name",), drop_first=("description",),
             wide=wide)
        aside("benchmark types (a [[benchmarks]] entry's type): "
              + ", ".join(BENCHMARK_KINDS) + "; see oodbench list benchmark-types", fmt)
    else:
        show(registry_frame(registry(what)), fmt, title=REGISTRIES[what][1], key=("name",),
             drop_first=("settings", "description"), wide=wide)


def registry(what: str) -> Registry[Any]:
    """The registry ``oodbench list`` shows as ``what`` (a key of :data:`REGISTRIES`)."""
    module, _, attribute = REGISTRIES[what][0].partition(":")
    found = getattr(importlib.import_module(module), attribute)
    return found if isinstance(found, Registry) else found()  # type: ignore[no-any-return]


def registry_frame(entries: Registry[Any]) -> pd.DataFrame:
    """name | needs | settings | description: one row per entry (:func:`oodbench.registry.describe`)."""
    return pd.DataFrame([describe(entry) for entry in entries.values()],
                        columns=["name", "needs", "settings", "description"])


#: the mark of a detector whose defaults need tuning (``Detector.untuned_defaults``)
TUNE_FIRST = "defaults need tuning"


def _presets(row: dict[str, Any]) -> str:
    """A detector's presets, and :data:`TUNE_FIRST` when its class declares defaults that are
    no published configuration (shown in this column so that it stays on a narrow terminal)."""
    shown = ", ".join(row["presets"])
    if row["untuned_defaults"]:
        shown = f"{shown}; {TUNE_FIRST}" if shown else TUNE_FIRST
    return shown


def _valid_values(row: dict[str, Any]) -> str:
    """A detector's hyper-parameters (a loss's options) with their declared valid values, then
    the checks between them (the class's ``checks``), as ``available()`` gives them
    (:func:`oodbench.constraints.described`): ``k: an integer >= 1; fit_fraction: in (0, 1]``."""
    return "; ".join([f"{name}: {text}" for name, text in row["ranges"].items()] + row["checks"])


def _registry_frame(rows: list[dict[str, Any]],
                    columns: dict[str, Callable[[dict[str, Any]], object]]) -> pd.DataFrame:
    """name | ``columns`` (each computed from a registry row) | defaults | paper, one row per
    registry entry (``fit_data``, shown in its own column, is left out of the defaults)."""
    return pd.DataFrame([{
        "name": row["name"],
        **{name: str(get(row)) for name, get in columns.items()},
        "defaults": ", ".join(f"{k}={v}" for k, v in row["defaults"].items() if k != "fit_data"),
        "paper": str(row["paper"]),
    } for row in rows], columns=["name", *columns, "defaults", "paper"])
