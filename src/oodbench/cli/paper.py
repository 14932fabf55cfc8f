"""``oodbench paper leaderboard | show | rank | findings``: the published C-OOD results
(Galil et al., ICLR 2023), bundled with oodbench and read offline by default."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from oodbench.cli.tables import aside, cell_text, resolve, show, table_options
from oodbench.errors import EmptyInputError, InvalidInputError, MissingDataError

_CSV_HELP = (
    "a local copy of all_paper_results.csv (default: the copy bundled with oodbench, "
    "checksummed against the official file)"
)
_SPARKS = "▁▂▃▄▅▆▇█"


def _load(csv: Path | None) -> pd.DataFrame:
    from oodbench.results import paper

    return paper.load(csv)


def emit(df: pd.DataFrame, fmt: str | None, *, title: str, digits: int | None, truncate: bool,
         key: Collection[str] = (), drop_first: Sequence[str] = (), wide: bool = False) -> None:
    """Print ``df`` with :func:`oodbench.cli.tables.show`, every digit of the published table
    (``SIGNIFICANT`` significant digits) unless ``digits`` is given (rounded, or cut with
    ``truncate``)."""
    from oodbench.results.paper import quantized

    show(quantized(df, digits, truncate=truncate), fmt, title=title, key=key,
         drop_first=drop_first, wide=wide, digits=digits)


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
    return table_options(fn)


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
def leaderboard_cmd(kappa: str, levels: str, top: int, model: str | None, metric: str,
                    fmt: str | None, wide: bool, digits: int | None, truncate: bool,
                    csv: Path | None) -> None:
    """The best published models per severity level for one confidence function."""
    from oodbench.results import paper

    df = _load(csv)
    board = paper.leaderboard(df, kappa, _parse_levels(levels), top, metric=metric, model=model)
    key = ("level", "rank", "model", metric)
    if resolve(fmt) != "table":
        emit(board, fmt, title=f"C-OOD leaderboard, kappa = {kappa}", digits=digits,
             truncate=truncate, key=key, wide=wide)
        return
    for level, rows in board.groupby("level", sort=True):
        emit(rows.drop(columns="level"), fmt, title=f"C-OOD level {level}, kappa = {kappa}",
             digits=digits, truncate=truncate, key=key, wide=wide)


@paper_cmd.command("show")
@click.argument("model")
@click.option("--kappa", default=None, help="one confidence function (default: every one)")
@click.option("--png", type=click.Path(path_type=Path), default=None,
              help="also draw the severity curves into this PNG file")
@_digits_options
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def show_cmd(model: str, kappa: str | None, png: Path | None, fmt: str | None, wide: bool,
             digits: int | None, truncate: bool, csv: Path | None) -> None:
    """Every published level and metric of one MODEL, with its severity curve."""
    from oodbench.results import paper

    df = _load(csv)
    rows = paper.get(model, kappa, df=df)
    shown = rows.drop(columns=["detector", "paper_kappa"])
    key = ("model", "kappa", "level", "auroc")
    if resolve(fmt) != "table":
        emit(shown, fmt, title=model, digits=digits, truncate=truncate, key=key, wide=wide)
    else:
        for k, sub in shown.groupby("kappa", sort=False):
            emit(sub.drop(columns=["model", "kappa"]), fmt, title=f"{model}, kappa = {k}",
                 digits=digits, truncate=truncate, key=key, wide=wide)
    width = max(len(str(k)) for k in shown["kappa"])
    for k, sub in shown.groupby("kappa", sort=False):  # (on stderr when piped)
        auroc = sub.sort_values("level")["auroc"].to_numpy()
        aside(f"{k:<{width}}  {sparkline(auroc)}  AUROC {cell_text(float(auroc[0]), digits)}"
              f" (level 0) -> {cell_text(float(auroc[-1]), digits)} (level {len(auroc) - 1})",
              fmt)
    if png is not None:
        _write_png(png, paper.plot_model_curves(df, model))


def _write_png(png: Path, fig: Any, note: str = "") -> None:
    """Write ``fig`` to ``png`` (its folder created, e.g. examples/out/ in a fresh clone)."""
    from oodbench.results import plots

    png.parent.mkdir(parents=True, exist_ok=True)
    png.write_bytes(plots.to_png(fig))
    click.echo(f"wrote {png}{note}", err=True)


def _read_results(results: Path, include_earlier: bool = False) -> tuple[pd.DataFrame, str]:
    """The C-OOD rows of a results file / folder (and the line about the earlier cells a folder
    leaves out), or a clear error saying why there are none."""
    from oodbench.results.leaderboard import detector_labels
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
        cood = cood.reset_index(drop=True)  # labelled with the preset and tuning of the long rows
        return cood.assign(label=detector_labels(cood, ok).to_numpy()), note
    return mine, note


@paper_cmd.command("rank")
@click.argument("results", type=click.Path(path_type=Path))
@click.option("--kappa", default=None,
              help="compare every row with this published kappa (default: by detector name)")
@click.option("--metric", default="auroc", show_default=True)
@click.option("--allow-mismatch", is_flag=True,
              help="rank results whose benchmark differs from the paper's (flagged as such)")
@click.option("--png", type=click.Path(path_type=Path), default=None,
              help="draw each detector's curve over the published curves into this PNG file "
                   "(one panel per published kappa)")
@click.option("--all", "include_earlier", is_flag=True,
              help="Also the cells of earlier versions of the experiment (an `oodbench run` "
                   "folder; labelled).")
@_digits_options
@click.option("--csv", "csv", type=click.Path(path_type=Path), default=None, help=_CSV_HELP)
def rank_cmd(results: Path, kappa: str | None, metric: str, allow_mismatch: bool,
             png: Path | None, include_earlier: bool, fmt: str | None, wide: bool,
             digits: int | None, truncate: bool, csv: Path | None) -> None:
    """Place your C-OOD results among the published models.

    RESULTS is a CSV or Parquet file of ``CoodBenchmark.run`` rows (columns ``detector``,
    ``level`` or ``group`` = ``level_<i>``, and ``auroc``), or the results table / output folder
    of ``oodbench run`` (its C-OOD rows are used). Results whose benchmark differs from the
    paper's (levels, window, ID set) are refused unless --allow-mismatch.
    """
    from oodbench.results import paper

    mine, note = _read_results(results, include_earlier)
    df = _load(csv)
    ranked = paper.rank(df, mine, kappa=kappa, metric=metric, allow_mismatch=allow_mismatch)
    checks = ranked.attrs["protocol"]
    shown = ranked.drop(columns="comparable")
    if fmt == "table":  # the label starts with the detector's name
        shown = shown.drop(columns="detector")
    emit(shown, fmt,
         title=f"{results.name} among the published C-OOD models ({metric})", digits=digits,
         truncate=truncate, key=("label", "detector", "kappa", "level", metric, "percentile_rank"),
         wide=wide)
    notes = [c for c in checks if c.status != "same"]
    verdict = ("comparable with the paper's benchmark" if not notes else
               "NOT comparable with the paper's benchmark" if any(c.status == "differs"
                                                                   for c in notes)
               else "comparable as far as the results record")
    aside(f"protocol: {verdict}", fmt)  # (on stderr when piped)
    for c in checks:
        aside(f"  {c.status:>8}  {c.item}: paper {c.published}, yours {c.yours}", fmt)
    if note:
        aside(note, fmt)
    if png is not None:
        panels, missing = paper.rank_panels(mine, kappa)
        for det, why in missing.items():  # a detector without a published kappa
            click.echo(f"no curve for {det}: {why}", err=True)
        if not panels:
            click.echo(f"{png} not written: no detector has a published kappa", err=True)
            return
        _write_png(png, paper.plot_rank(df, mine, kappa=kappa, metric=metric),
                   f" (kappa {', '.join(panels)})")


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
