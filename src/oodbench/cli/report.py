"""``oodbench report RESULTS_DIR``: the HTML report and Markdown summary of a results folder."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from oodbench.cli.tables import aside, resolve, show, table_options
from oodbench.errors import InvalidInputError

#: leaderboard columns shown in the terminal
TERMINAL_METRICS = ("auroc", "fpr95_id", "fpr95_ood", "id_accuracy")
#: the leaderboard columns a terminal table never cuts
LEADERBOARD_KEY = ("benchmark", "#", "model", "detector", "AUROC")


def leaderboard_frames(rows: pd.DataFrame, *, top: int | None = 10
                       ) -> list[tuple[str, str, pd.DataFrame, dict[tuple[int, str], str]]]:
    """Per benchmark: its name, a title, the leaderboard (best first; ``TERMINAL_METRICS``
    under their labels) and the styles of its best values (bold green)."""
    from oodbench.results import leaderboard as lb

    boards = []
    for name in lb.benchmarks(rows):
        board = lb.leaderboard(rows, name)
        shown = board if top is None else board.head(top)
        more = f" (top {top} of {len(board)})" if top is not None and len(board) > top else ""
        metrics = [m for m in TERMINAL_METRICS if m in board.columns]
        frame = pd.DataFrame({"#": shown["rank"].astype(int), "model": shown["model"].astype(str),
                              "detector": shown["label"].astype(str),
                              **{lb.METRIC_LABELS[m]: shown[m].astype(float) for m in metrics}})
        styles = {}
        for m in metrics:
            if board[m].nunique() > 1:
                best = board[m].max() if lb.HIGHER_IS_BETTER[m] else board[m].min()
                styles.update({(i, lb.METRIC_LABELS[m]): "bold green"
                               for i, value in enumerate(shown[m]) if value == best})
        boards.append((name, f"{name}{more}", frame.reset_index(drop=True), styles))
    return boards


def print_leaderboards(rows: pd.DataFrame, *, top: int | None = 10, fmt: str | None = None,
                       wide: bool = False) -> None:
    """The leaderboards of ``rows``: a table per benchmark, or (any other format) one table
    with a ``benchmark`` column first; values to 4 decimals."""
    boards = leaderboard_frames(rows, top=top)
    if resolve(fmt) == "table":
        for _, title, frame, styles in boards:
            show(frame, fmt, title=title, key=LEADERBOARD_KEY, digits=4, styles=styles,
                 wide=wide)
    elif boards:
        whole = pd.concat([frame.assign(benchmark=name) for name, _, frame, _ in boards])
        whole = whole[["benchmark", *(c for c in whole.columns if c != "benchmark")]]
        show(whole, fmt, title="leaderboards", digits=4)


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
@table_options
@click.option("--all", "include_earlier", is_flag=True,
              help="Also the cells of earlier versions of the experiment (labelled).")
@click.option("--no-figures", is_flag=True,
              help="Leave out the figures (curves, heat maps, histograms): the same tables, "
                   "much faster for a large study.")
def report_cmd(results_dir: Path, out: Path | None, pairs: tuple[str, ...], title: str | None,
               top: int, fmt: str | None, wide: bool, include_earlier: bool,
               no_figures: bool) -> None:
    """Write a self-contained HTML report and a Markdown summary of RESULTS_DIR.

    RESULTS_DIR is the output folder of `oodbench run` (it holds results/). The report shows
    the cells of the experiment last run into it; --all adds those of its earlier versions.
    """
    from oodbench.results.report import write_report

    if no_figures and pairs:
        raise InvalidInputError("--hist draws histograms and --no-figures leaves them out: "
                                "give one of the two")
    files = write_report(results_dir, out=out, title=title, include_earlier=include_earlier,
                         histograms=[_parse_pair(p) for p in pairs] or None,
                         figures=not no_figures)
    print_leaderboards(files.view.rows, top=top, fmt=fmt, wide=wide)
    if files.view.note:
        aside(files.view.note, fmt)
    aside(f"report: {files.html}  (summary: {files.markdown})", fmt)
