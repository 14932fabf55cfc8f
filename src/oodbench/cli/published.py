"""``oodbench published list | show | compare``: the published tables bundled with oodbench
(values exactly as printed) and your results beside them."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from oodbench.cli.paper import FORMATS, emit
from oodbench.errors import MissingDataError

#: the columns ``show`` prints in the terminal and in Markdown (csv and json print every column)
SHOWN = ("method", "backbone", "training", "ood_set", "metric", "unit", "value", "tuning",
         "paper_table")
#: the columns ``compare`` prints in the terminal and in Markdown
COMPARED = ("model", "detector", "benchmark", "group", "metric", "yours", "published", "unit",
            "published_method", "table", "comparison")


@click.group("published")
def published_cmd() -> None:
    """Published OOD tables (bundled, checksummed) and your results beside them.

    \b
    oodbench published list
    oodbench published show imagenet1k-vs-sun --method "ReAct (ResNet-50)"
    oodbench published show imagenet1k-resnet50-tuning --printed --format csv
    oodbench published compare results/
    """


@published_cmd.command("list")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def list_cmd(fmt: str) -> None:
    """Every published table: name, rows, title, paper and where it was read."""
    from oodbench import published

    rows = pd.DataFrame([{"table": name, "rows": len(published.load(name)), "paper": info.paper,
                          "title": info.title, "source": info.source}
                         for name, info in published.tables().items()])
    emit(rows if fmt in ("csv", "json") else rows.drop(columns="source"), fmt, title="published tables (oodbench published show TABLE)",
         digits=None, truncate=False)


@published_cmd.command("show")
@click.argument("table")
@click.option("--method", default=None, help="only this method (as the table prints it)")
@click.option("--printed", "as_printed", is_flag=True,
              help="the source's own table, cell for cell (its columns and order)")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="csv and json hold every column (settings, paper, where each value was read)")
def show_cmd(table: str, method: str | None, as_printed: bool, fmt: str) -> None:
    """The rows of TABLE, values exactly as published."""
    from oodbench import published

    info = published.table_info(table)
    if as_printed:
        rows = published.printed(table)
        if method is not None:
            rows = published.select(rows, method)
    else:
        rows = published.select(published.load(table), method).drop(columns="table")
        if fmt in ("table", "markdown"):
            rows = rows[list(SHOWN)]
    emit(rows.reset_index(drop=True), fmt, title=f"{info.title} ({info.paper})", digits=None,
         truncate=False)
    if fmt == "table":
        click.echo(f"source: {info.source}")


@published_cmd.command("compare")
@click.argument("results_dir", type=click.Path(path_type=Path))
@click.option("--table", "names", multiple=True,
              help="compare with this table only (repeatable; default: every table)")
@click.option("--allow-mismatch", is_flag=True,
              help="show the published value of near-matches too (flagged 'not comparable')")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--all", "include_earlier", is_flag=True,
              help="Also the cells of earlier versions of the experiment (labelled).")
def compare_cmd(results_dir: Path, names: tuple[str, ...], allow_mismatch: bool,
                fmt: str, include_earlier: bool) -> None:
    """Each row of RESULTS_DIR (an `oodbench run` folder) beside the published value it
    matches, or what differs from the closest one."""
    from oodbench import published
    from oodbench.results.table import ResultsTable

    table = ResultsTable(results_dir)
    if not table.exists():
        raise MissingDataError(
            f"{results_dir} has no results: pass the output folder of `oodbench run`"
        )
    view = table.view(include_earlier=include_earlier)
    rows = view.rows
    compared = published.compare(rows, tables_=list(names) or None,
                                 allow_mismatch=allow_mismatch)
    if fmt != "table":
        shown = compared if fmt in ("csv", "json") else compared[list(COMPARED)]
        emit(shown, fmt, title=f"{results_dir.name} beside the published results", digits=None,
             truncate=False)
    else:  # one block per row: the comparison texts are too long for table cells
        for r in compared.itertuples():
            published_text = (f"published {r.published} {r.unit}" if r.published
                              else "published value withheld")
            click.echo(f"{r.model} · {r.detector} · {r.benchmark} · {r.group} · {r.metric}: "
                       f"yours {r.yours} {r.unit}, {published_text} ({r.published_method}, "
                       f"{r.table})\n    {r.comparison}")
        n_match = int((compared["status"] == "match").sum())
        click.echo(f"{n_match} of {len(compared)} rows match a published row; near-matches say "
                   "what differs" + ("" if allow_mismatch else
                                     " (their published value needs --allow-mismatch)"))
    if view.note:
        click.echo(view.note, err=fmt != "table")
