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
            "published_method", "table", "comparison", "others")


@click.group("published")
def published_cmd() -> None:
    """Published OOD tables (bundled, checksummed) and your results beside them.

    \b
    oodbench published list
    oodbench published show imagenet1k-vs-sun --method "ReAct (ResNet-50)"
    oodbench published show imagenet1k-resnet50-tuning --printed --format csv
    oodbench published compare results/
    oodbench published reproduce imagenet1k-vs-sun --method "SCALE (ResNet50)" --out repro/ --dry-run
    """


@published_cmd.command("list")
@table_options
def list_cmd(fmt: str | None, wide: bool) -> None:
    """Every published table: name, rows, how many rows have a recipe (`oodbench published
    reproduce`), paper, title and where it was read."""
    from oodbench import published
    from oodbench.published.recipes import coverage

    rows = []
    for name, info in published.tables().items():
        covered, total = coverage(name)
        rows.append({"table": name, "rows": total, "with recipe": f"{covered:,} of {total:,}",
                     "paper": info.paper, "title": info.title, "source": info.source})
    show(pd.DataFrame(rows), fmt, title="published tables (oodbench published show TABLE)",
         key=("table", "rows", "with recipe"), drop_first=("source", "title"), wide=wide)


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
    from oodbench.run.reproduce import read_record

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
            if r.status == "match":
                published_text = f"same settings, {published_text}"
            block(f"{r.model} · {r.detector} · {r.benchmark} · {r.group} · {r.metric}: "
                  f"yours {r.yours} {r.unit}, {published_text} ({r.published_method}, "
                  f"{r.table})", width)
            block(f"    {r.comparison}", width)
    from oodbench.published.compare import CHOICE_RULE, summary_text

    aside(summary_text(compared) + "; near-matches say what differs"
          + ("" if allow_mismatch else " (their published value needs --allow-mismatch)"), fmt)
    others = int(compared["others"].sum())
    if others:
        aside(f"the published row shown for each: {CHOICE_RULE}; {others:,} other candidate "
              "rows not shown (column others)", fmt)
    record = read_record(results_dir)
    if record is not None:
        rep = record["reproduce"]
        aside(f"reproduced from recipe {rep['recipe']} ({rep['recipe_file']}): "
              f"{len(record.get('differences', []))} named differences from the recipe in "
              f"{results_dir / 'reproduce.toml'}", fmt)
    if view.note:
        aside(view.note, fmt)



@published_cmd.command("reproduce")
@click.argument("table")
@click.option("--method", default=None, help="the row's method as the table prints it")
@click.option("--recipe", "recipe_id", default=None,
              help="the recipe id, where a method has several (e.g. one per tuning protocol)")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="folder for experiment.toml (train.toml, reproduce.toml) and the results")
@click.option("--data-root", default="data", show_default=True, type=click.Path(path_type=Path),
              help="the folder the benchmark's datasets lie in, as `oodbench data info` says")
@click.option("--dry-run", is_flag=True, help="write the files and show the plan; run nothing")
@click.option("--model", default=None,
              help="override: this oodbench model spec instead of the recipe's (a named difference)")
@click.option("--weights", default=None, type=click.Path(path_type=Path),
              help="override: load this checkpoint (e.g. the released one) into the model")
@click.option("--random-init", is_flag=True,
              help="override: the row's architecture at random initialisation (a stand-in for "
                   "checking the pipeline; its weights are named as a difference)")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.pass_context
def reproduce_cmd(ctx: click.Context, table: str, method: str | None, recipe_id: str | None,
                  out: Path, data_root: Path, dry_run: bool, model: str | None,
                  weights: Path | None, random_init: bool, no_progress: bool) -> None:
    """Write the experiment that reproduces a published row of TABLE from its recipe, check
    its data, and run it (unless --dry-run).

    \b
    Every setting comes from the row's recipe (oodbench.published.recipes); one the recipe
    leaves "unknown" takes oodbench's default, and each such setting, each setting oodbench
    cannot apply and each override is written into experiment.toml's header and
    reproduce.toml as a named difference. Missing datasets: one message listing each with its
    `oodbench data info` / `download` command, exit status 2 (the files are still written).
    Afterwards: oodbench published compare OUT
    """
    from oodbench.run.reproduce import check_data, missing_data, reproduction, write

    repro = reproduction(table, method, recipe_id=recipe_id, data_root=data_root, model=model,
                         weights=weights, random_init=random_init)
    written = write(repro, out)
    con = console()
    r = repro.recipe
    con.print(f"recipe {r.id} ({r.file}): {', '.join(str(p) for p in written)}", markup=False,
              highlight=False)
    if repro.differences:
        diffs = pd.DataFrame([{"setting": d.setting, "recipe": d.recipe, "oodbench uses": d.used,
                               "why": d.why} for d in repro.differences])
        show(diffs, None, title=f"{len(diffs)} named differences from the recipe",
             key=("setting",), drop_first=("recipe",))
    # planning makes the detectors, which read their own files (a negative-prompt list)
    if dry_run and not any(need.how for need in missing_data(repro)):
        try:
            _print_plan(out / "experiment.toml")
        except MissingDataError:  # a training config's data: the message below names it
            pass
    check_data(repro, out)
    if dry_run:
        return
    from oodbench.cli.run import run_cmd

    ctx.invoke(run_cmd, experiment=out / "experiment.toml", use_ray=False, dry_run=False,
               with_report=False, top=10, shard_size=None, repair=False, no_progress=no_progress)


def _print_plan(path: Path) -> None:
    """The cells of the written experiment (planned without reading any data)."""
    from oodbench.run.experiment import load_experiment
    from oodbench.run.plan import make_plan

    plan = make_plan(load_experiment(path, check_paths=False))
    con = console()
    con.print(f"plan: {plan.summary()}", markup=False, highlight=False)
    for cell in plan.cells:
        con.print(f"  {cell.label()}", markup=False, highlight=False)
