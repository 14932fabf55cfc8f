"""Tables on the command line: how every table command prints its rows (``--format``, ``--wide``).

Formats:

``table``
    On a terminal: a table that fits the terminal's width. Each command names its *key* columns
    (names, methods, metrics, values): they are never cut and never wrapped. The other columns
    wrap (keeping at least ``WRAP_MIN`` cells each); when even wrapped they do not fit, columns
    are left out, the command's long texts first (``drop_first``: titles, descriptions,
    defaults, sources), then the others from the right, and one line under the table names them.
    Only when the key columns alone are wider than the terminal do the widest of them wrap
    (folded: no character is ever lost). ``--wide`` shows every column in full, however wide.
    Asked for explicitly (``--format table``) while stdout is not a terminal: the whole table at
    its natural width, nothing wrapped, cut or left out, no colours.
``tsv``
    The default when stdout is not a terminal (a pipe, a file): a header line, then one line per
    row, cells separated by tabs, nothing cut, no box drawing (a tab or newline inside a cell
    becomes a space), so ``oodbench list detectors | grep knn`` and ``cut -f`` work.
``csv``, ``json``
    Every column, typed: numbers as numbers (``SIGNIFICANT`` digits, or ``digits`` decimals),
    NaN empty (CSV) or null (JSON).
``markdown``
    A GitHub table under the title in bold.

Asides (a summary, a source, a verdict: :func:`aside`) print under a table on stdout; with tsv on
stderr, so that a pipe reads the rows alone; csv, json and markdown print the data alone.

Terminal or not is rich's ``Console.is_terminal``: stdout is a TTY, unless rich's environment
switches say otherwise (``TTY_COMPATIBLE=1`` or ``FORCE_COLOR`` force a terminal,
``TTY_COMPATIBLE=0`` forces none); the width is the terminal's, or ``COLUMNS``. The tests render
as an 80-column terminal with ``TTY_COMPATIBLE=1 COLUMNS=80`` (and ``TERM=dumb``: no colours).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import click
import numpy as np
import pandas as pd
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

FORMATS = ("table", "tsv", "csv", "json", "markdown")
#: significant digits shown without ``digits``: every digit a published table holds, none of the
#: binary noise of arithmetic on it (0.8419200000000001 -> 0.84192, 0.09999999999999998 -> 0.1)
SIGNIFICANT = 15
#: a wrapped column keeps at least this many cells (or its whole width when narrower)
WRAP_MIN = 16
#: the width of the console for text other than tables when stdout is not a terminal
PIPED_WIDTH = 160
_ONE_LINE = str.maketrans("\t\r\n", "   ")  # a TSV cell: no tab or line break inside


def console() -> Console:
    """stdout's console; when it is not a terminal, ``PIPED_WIDTH`` wide (progress lines and
    summaries are not squeezed to 80 columns)."""
    out = Console()
    return out if out.is_terminal else Console(width=PIPED_WIDTH)


def resolve(fmt: str | None) -> str:
    """The format to print: ``fmt``, or (``None``) table on a terminal and tsv otherwise."""
    return fmt or ("table" if Console().is_terminal else "tsv")


def table_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--format`` (``fmt``, default: table on a terminal, tsv otherwise) and ``--wide``."""
    fn = click.option("--wide", is_flag=True,
                      help="table: every column in full, however wide the terminal")(fn)
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                        help="default: table on a terminal, tsv (tab-separated, a header line, "
                             "one row per line) when piped")(fn)


def cell_text(value: object, digits: int | None = None, *, missing: str = "–") -> str:
    """One cell as text: floats to ``SIGNIFICANT`` significant digits, or ``digits`` decimals;
    NaN as ``missing``."""
    if isinstance(value, float):
        if math.isnan(value):
            return missing
        return f"{value:.{SIGNIFICANT}g}" if digits is None else f"{value:.{digits}f}"
    return str(value)


def _plain(value: object) -> object:
    """A JSON value: NaN -> None, numpy scalars -> Python, floats to ``SIGNIFICANT`` digits."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.{SIGNIFICANT}g}")
    return value


def _records(df: pd.DataFrame) -> list[dict[str, object]]:
    """``df`` as JSON-ready records (see ``_plain``)."""
    return [{str(k): _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def show(df: pd.DataFrame, fmt: str | None, *, title: str, key: Collection[str] = (),
         drop_first: Sequence[str] = (), wide: bool = False, digits: int | None = None,
         styles: Mapping[tuple[int, str], str] | None = None) -> None:
    """Print ``df`` in ``fmt`` (see the module's docstring; ``None``: table on a terminal, tsv
    otherwise). ``key``: the columns a terminal table never cuts, wraps or leaves out;
    ``drop_first``: the long texts left out first on a narrow terminal; ``digits``: decimals of
    floats (default: ``SIGNIFICANT`` significant digits); ``styles``: rich styles of cells in
    the terminal table, by (row position, column)."""
    fmt = resolve(fmt)
    if fmt == "csv":
        fixed = f"%.{SIGNIFICANT}g" if digits is None else f"%.{digits}f"
        click.echo(df.to_csv(index=False, float_format=fixed), nl=False)
        return
    if fmt == "json":
        click.echo(json.dumps(_records(df), indent=1))
        return
    columns = [str(c) for c in df.columns]
    rows = [[cell_text(v, digits, missing="" if fmt == "tsv" else "–") for v in row]
            for row in df.itertuples(index=False, name=None)]
    right = {str(c) for c in df.columns if df[c].dtype.kind in "fiu"}
    if fmt == "tsv":
        click.echo("\n".join("\t".join(c.translate(_ONE_LINE) for c in line)
                             for line in (columns, *rows)))
    elif fmt == "markdown":
        click.echo(f"**{title}**\n\n{_markdown(columns, rows, right)}\n")
    else:
        _table(title, columns, rows, right=right, key=set(key), drop_first=drop_first, wide=wide,
               styles=styles or {})


def aside(text: str, fmt: str | None) -> None:
    """A line under a table: stdout with the table format (wrapped to a terminal's width),
    stderr with tsv, left out with csv, json and markdown (their output is the data alone)."""
    fmt = resolve(fmt)
    if fmt in ("table", "tsv"):
        out = Console()
        block(text, out.width if fmt == "table" and out.is_terminal else None, err=fmt == "tsv")


def block(text: str, width: int | None, *, err: bool = False) -> None:
    """Echo ``text`` as is, or wrapped to ``width`` cells (continuation lines indented 4 cells
    more than the first)."""
    if width is not None:
        indent = " " * (len(text) - len(text.lstrip()) + 4)
        text = textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)
    click.echo(text, err=err)


def _markdown(columns: list[str], rows: list[list[str]], right: Collection[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if c in right else "---" for c in columns) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _chrome(n_columns: int) -> int:
    """Cells a rich table (default box, padding 1) adds to its columns' widths: 3 per column,
    1 for the right edge."""
    return 3 * n_columns + 1


def fit(natural: Mapping[str, int], key: Collection[str], drop_first: Sequence[str],
        width: int) -> dict[str, int]:
    """The columns shown in a table ``width`` cells wide and the width of each (in order), from
    each column's ``natural`` width (its widest cell or header); see the module's docstring."""
    shown = list(natural)

    def least(columns: list[str]) -> int:
        return _chrome(len(columns)) + sum(natural[c] if c in key else min(natural[c], WRAP_MIN)
                                           for c in columns)

    order = [c for c in drop_first if c in natural and c not in key]
    order += [c for c in reversed(shown) if c not in key and c not in order]
    for column in order:
        if least(shown) <= width:
            break
        shown.remove(column)
    room = width - _chrome(len(shown))
    widths = {c: natural[c] for c in shown}
    others = [c for c in shown if c not in key]
    if others:  # the key columns in full, the others share the rest
        fill = room - sum(natural[c] for c in shown if c in key)
        widths.update(zip(others, _water_fill([natural[c] for c in others], fill)))
    elif sum(widths.values()) > room:  # the key columns alone are too wide: the widest fold
        widths.update(zip(shown, _water_fill(list(widths.values()), room)))
    return widths


def _water_fill(natural: list[int], room: int) -> list[int]:
    """Cap the widest widths at one level, the highest that fits ``room`` (at least 1 cell)."""
    level = max(natural, default=1)
    while level > 1 and sum(min(n, level) for n in natural) > room:
        level -= 1
    return [min(n, level) for n in natural]


def _table(title: str, columns: list[str], rows: list[list[str]], *, right: Collection[str],
           key: Collection[str], drop_first: Sequence[str], wide: bool,
           styles: Mapping[tuple[int, str], str]) -> None:
    out = Console()
    natural = {c: max([cell_len(c), *(cell_len(row[i]) for row in rows)])
               for i, c in enumerate(columns)}
    if wide or not out.is_terminal:  # every column in full: a console as wide as the table
        widths = natural
        full = sum(natural.values()) + _chrome(len(natural))
        # (a height too: with a width alone, rich sizes a TERM=dumb terminal 80 x 25)
        out = Console(width=max(out.width if out.is_terminal else 0, full), height=out.height)
    else:
        widths = fit(natural, key, drop_first, out.width)
    table = Table(title=Text(title))  # Text: "[clip]" in a title or cell is not rich markup
    for column, width in widths.items():
        table.add_column(Text(column), justify="right" if column in right else "left",
                         width=width, no_wrap=width >= natural[column], overflow="fold")
    index = [columns.index(c) for c in widths]
    for r, row in enumerate(rows):
        table.add_row(*(Text(row[i], style=styles.get((r, columns[i]), "")) for i in index))
    out.print(table)
    dropped = [c for c in columns if c not in widths]
    if dropped:
        out.print(f"not shown at {out.width} columns: {', '.join(dropped)} (--wide or --format "
                  "tsv shows every column)", markup=False, highlight=False)
