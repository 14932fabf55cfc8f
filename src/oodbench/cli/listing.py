"""``oodbench list models | detectors | benchmarks | losses``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import pandas as pd

from oodbench.cli.tables import aside, show, table_options


@click.command("list")
@click.argument("what", type=click.Choice(["detectors", "models", "benchmarks", "losses"]))
@table_options
def list_cmd(what: str, fmt: str | None, wide: bool) -> None:
    """List the registered detectors, model specs, named benchmarks or training losses."""
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
        }), fmt, title="training losses (oodbench train, oodbench.train)", key=("name",),
            drop_first=("paper", "defaults"), wide=wide)
    elif what == "models":
        from oodbench.models import FAMILIES

        specs = pd.DataFrame([(f.syntax, f.description) for f in FAMILIES.values()],
                             columns=["spec", "description"])
        show(specs, fmt, title="model specs for oodbench.models.load(spec) and --model",
             key=("spec",), wide=wide)
        aside("any nn.Module: oodbench.models.wrap(module, feature_layer=..., head_layer=...)",
              fmt)
    else:
        from oodbench import benchmarks

        named = pd.DataFrame(list(benchmarks.available().items()),
                             columns=["name", "description"])
        show(named, fmt, title="benchmarks", key=("name",), wide=wide)


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
    """A detector's hyper-parameters with their declared valid values, then the checks between
    them (``Detector.checks``): ``k: an integer >= 1; fit_fraction: in (0, 1]``."""
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
