"""``oodbench report RESULTS_DIR``: the HTML report and Markdown summary of a results folder."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from oodbench.errors import InvalidInputError

#: leaderboard columns shown in the terminal
TERMINAL_METRICS = ("auroc", "fpr95_id", "fpr95_ood", "id_accuracy")


def console() -> Console:
    """A console that never squeezes tables to 80 columns when output is piped."""
    out = Console()
    return out if out.is_terminal else Console(width=160)


def leaderboard_tables(rows: pd.DataFrame, *, top: int | None = 10) -> list[Table]:
    """One rich table per benchmark: the leaderboard, best first, best values in bold green."""
    from rich.markup import escape

    from oodbench.results import leaderboard as lb

    tables = []
    for name in lb.benchmarks(rows):
        board = lb.leaderboard(rows, name)
        shown = board if top is None else board.head(top)
        more = f" (top {top} of {len(board)})" if top is not None and len(board) > top else ""
        table = Table(title=f"{escape(name)}{more}", title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("model")
        table.add_column("detector")
        metrics = [m for m in TERMINAL_METRICS if m in board.columns]
        for metric in metrics:
            table.add_column(lb.METRIC_LABELS[metric], justify="right")
        best = {m: (board[m].max() if lb.HIGHER_IS_BETTER[m] else board[m].min()) for m in metrics
                if board[m].nunique() > 1}
        for _, row in shown.iterrows():
            cells = []
            for m in metrics:
                text = "–" if pd.isna(row[m]) else f"{row[m]:.4f}"
                cells.append(f"[bold green]{text}[/]" if m in best and row[m] == best[m] else text)
            # escaped: "[openood, fit on train]" is text, not rich markup
            table.add_row(str(row["rank"]), escape(str(row["model"])), escape(str(row["label"])),
                          *cells)
        tables.append(table)
    return tables


def _parse_pair(text: str) -> tuple[str, str]:
    model, sep, detector = text.rpartition(":")
    if not sep or not model or not detector:
        raise InvalidInputError(
            f"--hist takes MODEL:DETECTOR (the names in the results table), got {text!r}"
        )
    return model, detector


@click.command("report")
@click.argument("results_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Folder for report.html and report.md (default: RESULTS_DIR).")
@click.option("--hist", "pairs", multiple=True, metavar="MODEL:DETECTOR",
              help="Draw the ID-against-OOD score histograms of this pair (repeatable; default: "
                   "each model's best detector and the MSP baseline).")
@click.option("--title", default=None, help="Report title (default: the experiment's name).")
@click.option("--top", default=10, show_default=True, help="Leaderboard rows printed per benchmark.")
@click.option("--all", "include_earlier", is_flag=True,
              help="Also the cells of earlier versions of the experiment (labelled).")
def report_cmd(results_dir: Path, out: Path | None, pairs: tuple[str, ...], title: str | None,
               top: int, include_earlier: bool) -> None:
    """Write a self-contained HTML report and a Markdown summary of RESULTS_DIR.

    RESULTS_DIR is the output folder of `oodbench run` (it holds results/). The report shows
    the cells of the experiment last run into it; --all adds those of its earlier versions.
    """
    from oodbench.results.report import write_report

    files = write_report(results_dir, out=out, title=title, include_earlier=include_earlier,
                         histograms=[_parse_pair(p) for p in pairs] or None)
    con = console()
    for table in leaderboard_tables(files.view.rows, top=top):
        con.print(table)
    if files.view.note:
        con.print(files.view.note, markup=False, highlight=False)
    con.print(f"report: [bold]{files.html}[/]  (summary: {files.markdown})")
