"""``oodbench run EXPERIMENT.toml``: run an experiment's grid, skipping finished cells."""

from __future__ import annotations

from pathlib import Path

import click

from oodbench.cli.report import console, leaderboard_tables


@click.command("run")
@click.argument("experiment", type=click.Path(path_type=Path))
@click.option("--ray", "use_ray", is_flag=True,
              help="One Ray task per model on a Ray cluster (pip install oodbench[ray]).")
@click.option("--dry-run", is_flag=True, help="Show the plan and what is left to run; run nothing.")
@click.option("--report", "with_report", is_flag=True, help="Write the HTML report afterwards.")
@click.option("--top", default=10, show_default=True, help="Leaderboard rows printed per benchmark.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def run_cmd(experiment: Path, use_ray: bool, dry_run: bool, with_report: bool, top: int,
            no_progress: bool) -> None:
    """Run EXPERIMENT.toml: models x detectors x benchmarks.

    Each (model, source) is extracted once through the cache; every detector is fitted and
    scored from it; rows are appended to <output>/results.parquet as cells finish. Cells
    already finished there are skipped; a failing cell is recorded and the rest goes on.
    See examples/experiment.toml for the file format.
    """
    from oodbench.results.table import ResultsTable
    from oodbench.run import run_experiment
    from oodbench.run.experiment import load_experiment
    from oodbench.run.plan import make_plan

    con = console()
    exp = load_experiment(experiment)
    plan = make_plan(exp)
    table = ResultsTable(exp.output)
    pending = plan.pending(table.finished_cells())
    con.print(f"[bold]{exp.name}[/]: {plan.summary()}; {len(pending.cells)} to run, "
              f"{len(plan.cells) - len(pending.cells)} already finished in {table.path}")
    if dry_run:
        for cell in pending.cells:
            con.print(f"  {cell.label()}")
        return
    rows = run_experiment(exp, executor="ray" if use_ray else "local", progress=not no_progress)
    for tab in leaderboard_tables(rows, top=top):
        con.print(tab)
    counts = rows.drop_duplicates("cell")["status"].value_counts()
    con.print(f"cells: {int(counts.get('ok', 0))} ok, {int(counts.get('failed', 0))} failed, "
              f"{int(counts.get('skipped', 0))} skipped; results: {table.path}")
    if counts.get("failed", 0):
        con.print(f"[red]failures[/]: see {exp.output / 'failures.log'} (or the report)")
    if with_report:
        from oodbench.results.report import write_report

        con.print(f"report: [bold]{write_report(exp.output).html}[/]")
    else:
        con.print(f"report: oodbench report {exp.output}")
