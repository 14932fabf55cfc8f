"""``oodbench paper leaderboard | rank``: the published C-OOD results (Galil et al., ICLR 2023)."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from oodbench.errors import InvalidInputError, MissingDataError

_CSV_HELP = (
    "a local copy of all_paper_results.csv (default: download the official file once, "
    "checksummed, into the oodbench cache)"
)


def _load(csv: Path | None) -> pd.DataFrame:
    from oodbench.results import paper

    return paper.load(csv)


def _print(df: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    for col in df.columns:
        if df[col].dtype.kind in "fiu":
            table.add_column(str(col), justify="right")
        else:  # names are never cut
            width = int(df[col].astype(str).str.len().max()) if len(df) else 1
            table.add_column(str(col), no_wrap=True, min_width=width)
    for row in df.itertuples(index=False):
        table.add_row(*[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row])
    console = Console()
    if not console.is_terminal:  # piped or captured: never squeeze the table to 80 columns
        console = Console(width=200)
    console.print(table)


def _parse_levels(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InvalidInputError(f"--levels takes comma-separated integers like 0,5,10; got {text!r}") from None


@click.group("paper")
def paper_cmd() -> None:
    """Published C-OOD results: leaderboards and where your model ranks.

    \b
    oodbench paper leaderboard --kappa max_logit --levels 0,5,10 --top 10
    oodbench paper rank results.parquet
    """


@paper_cmd.command("leaderboard")
@click.option("--kappa", default="max_logit", show_default=True,
              help="confidence function: softmax, max_logit, entropy, odin, mc_dropout "
                   "(or the detector name: msp, ...)")
@click.option("--levels", default="0,5,10", show_default=True,
              help="comma-separated severity levels (0 = easiest, 10 = hardest)")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--metric", default="auroc", show_default=True)
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def leaderboard_cmd(kappa: str, levels: str, top: int, metric: str, csv: Path | None) -> None:
    """The best published models per severity level for one confidence function."""
    from oodbench.results import paper

    df = _load(csv)
    board = paper.leaderboard(df, kappa, _parse_levels(levels), top, metric=metric)
    for level, rows in board.groupby("level", sort=True):
        _print(rows.drop(columns="level"), f"C-OOD level {level}, kappa = {kappa}")


@paper_cmd.command("rank")
@click.argument("results", type=click.Path(path_type=Path))
@click.option("--kappa", default=None,
              help="compare every row with this published kappa (default: by detector name)")
@click.option("--metric", default="auroc", show_default=True)
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def rank_cmd(results: Path, kappa: str | None, metric: str, csv: Path | None) -> None:
    """Place your CoodBenchmark results among the published models.

    RESULTS is a CSV or Parquet file of ``CoodBenchmark.run`` rows (columns ``detector``,
    ``level`` or ``group`` = ``level_<i>``, and ``auroc``), or the results table / output folder
    of ``oodbench run`` (its C-OOD rows are used).
    """
    from oodbench.results import paper
    from oodbench.results.table import to_wide

    if results.is_dir():
        results = results / "results.parquet"
    if not results.is_file():
        raise MissingDataError(
            f"results file {results} does not exist: pass a CSV/Parquet of CoodBenchmark rows "
            "or the output folder of `oodbench run`"
        )
    mine = pd.read_parquet(results) if results.suffix == ".parquet" else pd.read_csv(results)
    if {"metric", "value", "status"} <= set(mine.columns):  # the long table of `oodbench run`
        mine = to_wide(mine)
        mine = mine[mine["level"].notna()]
    ranked = paper.rank(_load(csv), mine, kappa=kappa, metric=metric)
    _print(ranked, f"{results.name} among the published C-OOD models ({metric})")
