"""``oodbench list models | detectors | benchmarks | losses``."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table


@click.command("list")
@click.argument("what", type=click.Choice(["detectors", "models", "benchmarks", "losses"]))
def list_cmd(what: str) -> None:
    """List the registered detectors, model specs, named benchmarks or training losses."""
    console = Console()
    if what == "detectors":
        from oodbench import detectors

        console.print(_registry_table(
            "detectors (score: higher = more in-distribution)", ("needs", "fits on", "presets"),
            [(row, (", ".join(row["requires"]), row["defaults"].get("fit_data", ""),
                    ", ".join(row["presets"]))) for row in detectors.available()]))
    elif what == "losses":
        from oodbench import losses

        console.print(_registry_table(
            "training losses (oodbench train, oodbench.train)", ("needs outliers",),
            [(row, ("yes" if row["needs_outliers"] else "",)) for row in losses.available()]))
    elif what == "models":
        from oodbench import models

        click.echo(models.describe_specs())  # plain text: "oodbench[clip]" is not rich markup
    else:
        from oodbench import benchmarks

        table = Table(title="benchmarks")
        table.add_column("name")
        table.add_column("description")
        for name, description in benchmarks.available().items():
            table.add_row(escape(name), escape(description))
        console.print(table)


def _registry_table(
    title: str, columns: tuple[str, ...], rows: list[tuple[dict[str, Any], tuple[str, ...]]]
) -> Table:
    """name | ``columns`` | defaults | paper, one row per registry entry (``fit_data``, shown in
    its own column, is left out of the defaults)."""
    table = Table(title=title)
    for col in ("name", *columns, "defaults", "paper"):
        table.add_column(col)
    for row, values in rows:
        defaults = ", ".join(f"{k}={v}" for k, v in row["defaults"].items() if k != "fit_data")
        cells = (row["name"], *values, defaults, row["paper"])
        table.add_row(*(escape(str(c)) for c in cells))  # "[...]" in a value is not markup
    return table
