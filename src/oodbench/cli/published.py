"""``oodbench published list | show | compare``: the published tables bundled with oodbench
(values exactly as printed) and your results beside them."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from oodbench.cli.tables import aside, block, console, resolve, show, table_options
from oodbench.errors import MissingDataError

#: the columns ``show`` prints as a table, tsv and Markdown (csv and json print every column)
SHOWN = ("method", "backbone", "training", "ood_set", "metric", "unit", "value", "tuning",
         "paper_table")
#: the columns of ``show`` a terminal table never cuts; and its long texts, left out first
SHOWN_KEY = ("method", "ood_set", "metric", "value")
SHOWN_LONG = ("training", "paper_table", "backbone", "tuning")
#: the columns ``compare`` prints as tsv and Markdown
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
@table_options
def list_cmd(fmt: str | None, wide: bool) -> None:
    """Every published table: name, rows, paper, title and where it was read."""
    from oodbench import published

    rows = pd.DataFrame([{"table": name, "rows": len(published.load(name)), "paper": info.paper,
                          "title": info.title, "source": info.source}
                         for name, info in published.tables().items()])
    show(rows, fmt, title="published tables (oodbench published show TABLE)",
         key=("table", "rows"), drop_first=("source", "title"), wide=wide)


@published_cmd.command("show")
@click.argument("table")
@click.option("--method", default=None,
              help="only this method (as the table prints it; with --printed, its rows)")
@click.option("--printed", "as_printed", is_flag=True,
              help="the source's own table, cell for cell (its columns and order); an error "
                   "for a table without one")
@table_options
def show_cmd(table: str, method: str | None, as_printed: bool, fmt: str | None,
             wide: bool) -> None:
    """The rows of TABLE, values exactly as published (csv and json: every column, with the
    settings, the paper and where each value was read)."""
    from oodbench import published

    info = published.table_info(table)
    key: tuple[str, ...] = SHOWN_KEY
    long: tuple[str, ...] = SHOWN_LONG
    if as_printed:  # a table without a printed form is refused (exit 2), naming those with one
        rows = published.printed(table, method=method)
        key = (*info.printed.get("key", ("method",)), *info.printed["values"])
        long = ()
    else:
        rows = published.select(published.load(table).drop(columns="table"), method)
        if resolve(fmt) in ("table", "tsv", "markdown"):
            rows = rows[list(SHOWN)]
    show(rows.reset_index(drop=True), fmt, title=f"{info.title} ({info.paper})", key=key,
         drop_first=long, wide=wide)
    aside(f"source: {info.source}", fmt)


@published_cmd.command("compare")
@click.argument("results_dir", type=click.Path(path_type=Path))
@click.option("--table", "names", multiple=True,
              help="compare with this table only (repeatable; default: every table)")
@click.option("--allow-mismatch", is_flag=True,
              help="show the published value of near-matches too (flagged 'not comparable')")
@table_options
@click.option("--all", "include_earlier", is_flag=True,
              help="Also the cells of earlier versions of the experiment (labelled).")
def compare_cmd(results_dir: Path, names: tuple[str, ...], allow_mismatch: bool,
                fmt: str | None, wide: bool, include_earlier: bool) -> None:
    """Each row of RESULTS_DIR (an `oodbench run` folder) beside the published value it
    matches, or what differs from the closest one (on a terminal: a block per row, wrapped to
    its width unless --wide)."""
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
    if resolve(fmt) != "table":
        shown = compared if fmt in ("csv", "json") else compared[list(COMPARED)]
        show(shown, fmt, title=f"{results_dir.name} beside the published results")
    else:  # one block per row: the comparison texts are too long for table cells
        out = console()
        width = out.width if out.is_terminal and not wide else None
        for r in compared.itertuples():
            published_text = (f"published {r.published} {r.unit}" if r.published
                              else "published value withheld")
            block(f"{r.model} · {r.detector} · {r.benchmark} · {r.group} · {r.metric}: "
                  f"yours {r.yours} {r.unit}, {published_text} ({r.published_method}, "
                  f"{r.table})", width)
            block(f"    {r.comparison}", width)
    n_match = int((compared["status"] == "match").sum())
    aside(f"{n_match} of {len(compared)} rows match a published row; near-matches say what "
          "differs" + ("" if allow_mismatch else " (their published value needs --allow-mismatch)"),
          fmt)
    if view.note:
        aside(view.note, fmt)

