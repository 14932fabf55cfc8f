"""``oodbench list models | detectors | benchmarks | losses``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table


@click.command("list")
@click.argument("what", type=click.Choice(["detectors", "models", "benchmarks", "losses"]))
def list_cmd(what: str) -> None:
    """List the registered detectors, model specs, named benchmarks or training losses."""
    console = Console()
    if what == "detectors":
        from oodbench import detectors

        table = Table(title="detectors (score: higher = more in-distribution)")
        for col in ("name", "needs", "defaults", "paper"):
            table.add_column(col)
        for row in detectors.available():
            defaults = ", ".join(f"{k}={v}" for k, v in row["defaults"].items())
            table.add_row(row["name"], ", ".join(row["requires"]), defaults, row["paper"])
        console.print(table)
    elif what == "losses":
        from oodbench import losses

        table = Table(title="training losses (oodbench train, oodbench.train)")
        for col in ("name", "options", "needs outliers", "paper"):
            table.add_column(col)
        for row in losses.available():
            options = ", ".join(f"{k}={v}" for k, v in row["defaults"].items())
            table.add_row(row["name"], options, "yes" if row["needs_outliers"] else "", row["paper"])
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
