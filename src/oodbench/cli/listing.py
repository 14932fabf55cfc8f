"""``oodbench list models | detectors | benchmarks``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table


@click.command("list")
@click.argument("what", type=click.Choice(["detectors", "models", "benchmarks"]))
def list_cmd(what: str) -> None:
    """List the registered detectors, model specs or named benchmarks."""
    console = Console()
    if what == "detectors":
        from oodbench import detectors

        table = Table(title="detectors (score: higher = more in-distribution)")
        for col in ("name", "needs", "fits on", "defaults", "presets", "paper"):
            table.add_column(col)
        for row in detectors.available():
            params = dict(row["defaults"])
            fit_data = params.pop("fit_data", "")
            defaults = ", ".join(f"{k}={v}" for k, v in params.items())
            table.add_row(row["name"], ", ".join(row["requires"]), fit_data, defaults,
                          ", ".join(row["presets"]), row["paper"])
        console.print(table)
    elif what == "models":
        from oodbench import models

        console.print(models.describe_specs())
    else:
        from oodbench import benchmarks

        table = Table(title="benchmarks")
        table.add_column("name")
        table.add_column("description")
        for name, description in benchmarks.available().items():
            table.add_row(name, description)
        console.print(table)
