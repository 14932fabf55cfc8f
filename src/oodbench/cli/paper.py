"""``oodbench paper leaderboard | show | rank | findings``: the published C-OOD results
(Galil et al., ICLR 2023), bundled with oodbench and read offline by default."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from oodbench.errors import EmptyInputError, InvalidInputError, MissingDataError, UnknownNameError

_CSV_HELP = (
    "a local copy of all_paper_results.csv (default: the copy bundled with oodbench, "
    "checksummed against the official file)"
)
FORMATS = ("table", "csv", "json", "markdown")
_SPARKS = "▁▂▃▄▅▆▇█"


def _load(csv: Path | None) -> pd.DataFrame:
    from oodbench.results import paper

    return paper.load(csv)


def _console() -> Console:
    console = Console()
    if not console.is_terminal:  # piped or captured: never squeeze the table to 80 columns
        console = Console(width=200)
    return console


#: significant digits shown without --digits: every digit the published table holds, none of
#: the binary noise of arithmetic on it (0.8419200000000001 -> 0.84192, 0.09999999999999998 -> 0.1)
SIGNIFICANT = 15


def _cell(value: object, digits: int | None) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{SIGNIFICANT}g}" if digits is None else f"{value:.{digits}f}"
    return str(value)


def _plain(value: object) -> object:
    """A JSON value: NaN -> None, numpy scalars -> Python, floats to ``SIGNIFICANT`` digits."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.{SIGNIFICANT}g}")
    return value


def _print_table(df: pd.DataFrame, title: str, digits: int | None) -> None:
    table = Table(title=title)
    for col in df.columns:
        if df[col].dtype.kind in "fiu":
            table.add_column(str(col), justify="right")
        else:  # names are never cut
            width = int(df[col].astype(str).str.len().max()) if len(df) else 1
            table.add_column(str(col), no_wrap=True, min_width=width)
    for row in df.itertuples(index=False):
        table.add_row(*[_cell(v, digits) for v in row])
    _console().print(table)


def _markdown(df: pd.DataFrame, digits: int | None) -> str:
    numeric = [df[c].dtype.kind in "fiu" for c in df.columns]
    lines = ["| " + " | ".join(str(c) for c in df.columns) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, digits).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def _records(df: pd.DataFrame) -> list[dict[str, object]]:
    return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def emit(df: pd.DataFrame, fmt: str, *, title: str, digits: int | None, truncate: bool) -> None:
    """Print ``df`` as a rich table, CSV, JSON (records) or Markdown, every digit of the
    published table (``SIGNIFICANT`` significant digits) unless ``digits`` is given (rounded, or
    cut with ``truncate``)."""
    from oodbench.results.paper import quantized

    df = quantized(df, digits, truncate=truncate)
    if fmt == "table":
        _print_table(df, title, digits)
    elif fmt == "csv":
        fixed = f"%.{SIGNIFICANT}g" if digits is None else f"%.{digits}f"
        click.echo(df.to_csv(index=False, float_format=fixed), nl=False)
    elif fmt == "json":
        click.echo(json.dumps(_records(df), indent=1))
    else:
        click.echo(f"**{title}**\n\n{_markdown(df, digits)}\n")


def sparkline(values: np.ndarray) -> str:
    """A terminal sparkline of ``values`` scaled to their own range."""
    values = np.asarray(values, dtype=float)
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    span = hi - lo if hi > lo else 1.0
    idx = np.clip(((values - lo) / span * (len(_SPARKS) - 1)).round().astype(int), 0, len(_SPARKS) - 1)
    return "".join(_SPARKS[i] for i in idx)


def _parse_levels(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InvalidInputError(f"--levels takes comma-separated integers like 0,5,10; got {text!r}") from None


def _digits_options(fn):  # type: ignore[no-untyped-def]
    fn = click.option("--truncate", is_flag=True,
                      help="cut to --digits instead of rounding (the paper's leaderboard truncates)")(fn)
    fn = click.option("--digits", type=click.IntRange(0, 17), default=None,
                      help="decimals to show (default: the file's full precision)")(fn)
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                        show_default=True)(fn)


@click.group("paper")
def paper_cmd() -> None:
    """Published C-OOD results (bundled, offline): leaderboards, one model, findings, your rank.

    \b
    oodbench paper leaderboard --kappa max_logit --levels 0,5,10 --top 10
    oodbench paper leaderboard --model vit_large_patch32_384 --digits 4 --truncate
    oodbench paper show vit_large_patch32_384 --kappa max_logit --png vit.png
    oodbench paper findings --out findings/
    oodbench paper rank results/ --png rank.png
    """


@paper_cmd.command("leaderboard")
@click.option("--kappa", default="max_logit", show_default=True,
              help="confidence function: softmax, max_logit, entropy, odin, mc_dropout "
                   "(or the detector name: msp, ...)")
@click.option("--levels", default="0,5,10", show_default=True,
              help="comma-separated severity levels (0 = easiest, 10 = hardest)")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1),
              help="models per level (ignored with --model)")
@click.option("--model", "model", default=None,
              help="only this model, or a shell pattern like 'vit_large_*', with its rank")
@click.option("--metric", default="auroc", show_default=True)
@_digits_options
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def leaderboard_cmd(kappa: str, levels: str, top: int, model: str | None, metric: str, fmt: str,
                    digits: int | None, truncate: bool, csv: Path | None) -> None:
    """The best published models per severity level for one confidence function."""
    from oodbench.results import paper

    df = _load(csv)
    board = paper.leaderboard(df, kappa, _parse_levels(levels), top, metric=metric, model=model)
    if fmt != "table":
        emit(board, fmt, title=f"C-OOD leaderboard, kappa = {kappa}", digits=digits,
             truncate=truncate)
        return
    for level, rows in board.groupby("level", sort=True):
        emit(rows.drop(columns="level"), fmt, title=f"C-OOD level {level}, kappa = {kappa}",
             digits=digits, truncate=truncate)


@paper_cmd.command("show")
@click.argument("model")
@click.option("--kappa", default=None, help="one confidence function (default: every one)")
@click.option("--png", type=click.Path(path_type=Path), default=None,
              help="also draw the severity curves into this PNG file")
@_digits_options
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def show_cmd(model: str, kappa: str | None, png: Path | None, fmt: str, digits: int | None,
             truncate: bool, csv: Path | None) -> None:
    """Every published level and metric of one MODEL, with its severity curve."""
    from oodbench.results import paper, plots

    df = _load(csv)
    rows = paper.get(model, kappa, df=df)
    shown = rows.drop(columns=["detector", "paper_kappa"])
    if fmt != "table":
        emit(shown, fmt, title=model, digits=digits, truncate=truncate)
    else:
        for k, sub in shown.groupby("kappa", sort=False):
            emit(sub.drop(columns="kappa"), fmt, title=f"{model}, kappa = {k}", digits=digits,
                 truncate=truncate)
        width = max(len(str(k)) for k in shown["kappa"])
        for k, sub in shown.groupby("kappa", sort=False):
            auroc = sub.sort_values("level")["auroc"].to_numpy()
            click.echo(f"{k:<{width}}  {sparkline(auroc)}  AUROC {_cell(float(auroc[0]), digits)}"
                       f" (level 0) -> {_cell(float(auroc[-1]), digits)} (level {len(auroc) - 1})")
    if png is not None:
        fig = paper.plot_model_curves(df, model)
        png.write_bytes(plots.to_png(fig))
        click.echo(f"wrote {png}", err=True)


def _read_results(results: Path, include_earlier: bool = False) -> tuple[pd.DataFrame, str]:
    """The C-OOD rows of a results file / folder (and the line about the earlier cells a folder
    leaves out), or a clear error saying why there are none."""
    from oodbench.results.table import ResultsTable, to_wide

    note = ""
    if results.is_dir() and ResultsTable(results).exists():
        view = ResultsTable(results).view(include_earlier=include_earlier)
        mine, note = view.rows, view.note
    else:
        if results.is_dir():
            results = results / "results.parquet"
        if not results.is_file():
            raise MissingDataError(
                f"results file {results} does not exist: pass a CSV/Parquet of CoodBenchmark "
                "rows or the output folder of `oodbench run`"
            )
        mine = pd.read_parquet(results) if results.suffix == ".parquet" else pd.read_csv(results)
    if {"metric", "value", "status"} <= set(mine.columns):  # the long table of `oodbench run`
        ok = mine[mine["status"] == "ok"]
        if ok.empty:
            statuses = mine.drop_duplicates("cell")["status"].value_counts().to_dict()
            raise EmptyInputError(
                f"{results} has no finished cell to rank (cells: {statuses}); see the failures "
                "with `oodbench report` and run the experiment again"
            )
        wide = to_wide(mine)
        cood = wide[wide["level"].notna()]
        if cood.empty:
            names = sorted(set(ok["benchmark"].astype(str)))
            raise EmptyInputError(
                f"{results} has no C-OOD rows (no severity levels): its benchmarks are "
                f"{names}. Only a `cood` benchmark can be ranked against the paper; add "
                "[[benchmarks]] type = \"cood\" to the experiment"
            )
        return cood.reset_index(drop=True), note
    return mine, note


@paper_cmd.command("rank")
@click.argument("results", type=click.Path(path_type=Path))
@click.option("--kappa", default=None,
              help="compare every row with this published kappa (default: by detector name)")
@click.option("--metric", default="auroc", show_default=True)
@click.option("--allow-mismatch", is_flag=True,
              help="rank results whose benchmark differs from the paper's (flagged as such)")
@click.option("--png", type=click.Path(path_type=Path), default=None,
              help="draw each detector's curve over the published curves (one PNG per detector: "
                   "NAME-<detector>.png when there are several)")
@click.option("--all", "include_earlier", is_flag=True,
              help="Also the cells of earlier versions of the experiment (an `oodbench run` "
                   "folder; labelled).")
@_digits_options
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def rank_cmd(results: Path, kappa: str | None, metric: str, allow_mismatch: bool,
             png: Path | None, include_earlier: bool, fmt: str, digits: int | None,
             truncate: bool, csv: Path | None) -> None:
    """Place your C-OOD results among the published models.

    RESULTS is a CSV or Parquet file of ``CoodBenchmark.run`` rows (columns ``detector``,
    ``level`` or ``group`` = ``level_<i>``, and ``auroc``), or the results table / output folder
    of ``oodbench run`` (its C-OOD rows are used). Results whose benchmark differs from the
    paper's (levels, window, ID set) are refused unless --allow-mismatch.
    """
    from oodbench.results import paper, plots

    mine, note = _read_results(results, include_earlier)
    df = _load(csv)
    ranked = paper.rank(df, mine, kappa=kappa, metric=metric, allow_mismatch=allow_mismatch)
    checks = ranked.attrs["protocol"]
    emit(ranked.drop(columns="comparable"), fmt,
         title=f"{results.name} among the published C-OOD models ({metric})", digits=digits,
         truncate=truncate)
    if fmt == "table":
        notes = [c for c in checks if c.status != "same"]
        verdict = ("comparable with the paper's benchmark" if not notes else
                   "NOT comparable with the paper's benchmark" if any(c.status == "differs"
                                                                       for c in notes)
                   else "comparable as far as the results record")
        click.echo(f"protocol: {verdict}")
        for c in checks:
            click.echo(f"  {c.status:>8}  {c.item}: paper {c.published}, yours {c.yours}")
    if note:
        click.echo(note, err=fmt != "table")
    if png is not None:
        detectors = list(dict.fromkeys(mine["detector"].astype(str)))
        for det in detectors:
            target = png if len(detectors) == 1 else png.with_name(f"{png.stem}-{det}{png.suffix}")
            try:
                fig = paper.plot_among_published(df, mine, detector=det, kappa=kappa,
                                                  metric=metric)
            except UnknownNameError as err:  # a detector without a published kappa
                click.echo(f"no figure for {det}: {err}", err=True)
                continue
            target.write_bytes(plots.to_png(fig))
            click.echo(f"wrote {target}", err=True)


@paper_cmd.command("findings")
@click.option("--kappa", default="softmax", show_default=True,
              help="the confidence function the findings are computed for (the official "
                   "code's default is softmax)")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="also write each finding's figure (finding-<n>.png), its numbers "
                   "(finding-<n>.csv) and findings.md into this folder")
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def findings_cmd(kappa: str, out: Path | None, csv: Path | None) -> None:
    """The five findings of the paper's abstract, recomputed from its published table."""
    from oodbench.results import plots
    from oodbench.results.paper_findings import findings

    results = findings(_load(csv), kappa=kappa)
    text = [f.text() for f in results]
    click.echo("\n\n".join(text))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        lines = [f"# C-OOD paper findings, recomputed (kappa = {kappa})", ""]
        for f in results:
            f.numbers.to_csv(out / f"finding-{f.number}.csv", index=False)
            for name, extra in f.more.items():
                extra.to_csv(out / f"finding-{f.number}-{name}.csv", index=False)
            (out / f"finding-{f.number}.png").write_bytes(plots.to_png(f.figure()))
            lines += [f"## ({f.number}) {f.title}", "", f"> {f.claim}", "",
                      f"**Table:** {f.measured}", "", f"**Verdict:** {f.verdict} ({f.rule})", "",
                      f"![finding {f.number}](finding-{f.number}.png)", ""]
        (out / "findings.md").write_text("\n".join(lines), encoding="utf-8")
        click.echo(f"wrote {out}/findings.md, finding-<n>.png and finding-<n>.csv", err=True)
