"""``oodbench run EXPERIMENT.toml``: run an experiment's grid, skipping finished cells."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import click

from oodbench.cli.report import print_leaderboards
from oodbench.cli.tables import console


@click.command("run")
@click.argument("experiment", type=click.Path(path_type=Path))
@click.option("--ray", "use_ray", is_flag=True,
              help="Run on a Ray cluster (pip install oodbench[ray]): one task per model, and "
                   "each extraction split into one task per cache shard (one GPU each when the "
                   "cluster has GPUs).")
@click.option("--dry-run", is_flag=True,
              help="Show the plan and what is left to run, and check it (data, models, labels, "
                   "C-OOD windows) without a forward pass; run nothing.")
@click.option("--report", "with_report", is_flag=True, help="Write the HTML report afterwards.")
@click.option("--top", default=10, show_default=True, help="Leaderboard rows printed per benchmark.")
@click.option("--shard-size", type=click.IntRange(min=1), default=None,
              help="Images per extraction shard, the unit a kill can lose (default: measured, "
                   "about 10 s of work and at most 256 MiB).")
@click.option("--repair", is_flag=True,
              help="Delete damaged cache entries (checksum mismatch) and extract them again.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def run_cmd(experiment: Path, use_ray: bool, dry_run: bool, with_report: bool, top: int,
            shard_size: int | None, repair: bool, no_progress: bool) -> None:
    """Run EXPERIMENT.toml: models x detectors x benchmarks.

    Each (model, source) is extracted once through the cache; every detector is fitted and
    scored from it; each cell's rows are written to <output>/results/ as it finishes. Cells
    already finished there are skipped; a failing cell is recorded and the rest goes on. The
    reports of <output> show this experiment's cells (an earlier version's are kept).
    See examples/experiment.toml for the file format.

    \b
    Exit status:
      0  every cell is ok, not applicable, or already finished
      1  at least one cell failed (the count is printed; failures.log has the tracebacks)
      2  a user error found before any forward pass (bad file, path, name, an empty
         folder, labels beyond the model's classes, a C-OOD window larger than the
         pool); nothing ran
      130  interrupted (Ctrl-C): the finished cells and the cached activations are
         kept; run the same command again to resume
    """
    from oodbench.run import prepare, run_experiment

    con = console()
    prepared = prepare(experiment)  # the one plan of this run
    exp, plan, table, pending = prepared.experiment, prepared.plan, prepared.table, prepared.pending
    con.print(f"[bold]{exp.name}[/]: {plan.summary()}; {len(pending.cells)} to run, "
              f"{len(plan.cells) - len(pending.cells)} already finished in {table.path}")
    if dry_run:
        from oodbench.run.checks import check_plan, raise_problems

        for cell in pending.cells:
            con.print(f"  {cell.label()}", markup=False, highlight=False)
        if pending.cells:
            raise_problems(check_plan(pending))
            con.print(f"checks passed: data, {len(pending.models)} model(s), labels and C-OOD "
                      "windows (nothing extracted)")
        return
    overrides = {"repair": repair, **({"shard_size": shard_size} if shard_size else {})}
    rows = run_experiment(prepared, executor="ray" if use_ray else "local",
                          progress=not no_progress, extract_options=overrides)
    print_leaderboards(rows, top=top, fmt="table")
    ran = {c.key for c in pending.cells}
    latest = rows.drop_duplicates("cell")
    counts = latest[latest["cell"].isin(ran)]["status"].value_counts()
    n_failed = int(counts.get("failed", 0))
    con.print(f"cells: {cell_counts(counts, len(plan.cells) - len(ran))}; results: {table.path}")
    from oodbench.results.table import ResultsView

    note = ResultsView(rows, table.earlier_cells()).note
    if note:
        con.print(note, markup=False, highlight=False)
    if with_report:
        from oodbench.results.report import write_report

        con.print(f"report: [bold]{write_report(exp.output).html}[/]")
    else:
        con.print(f"report: oodbench report {exp.output}")
    if n_failed:
        con.print(f"[red]{n_failed} of {len(plan.cells)} cells failed[/]: see "
                  f"{exp.output / 'failures.log'} (or the report)")
        sys.exit(1)


def cell_counts(counts: Mapping[str, int], finished_before: int) -> str:
    """``"4 ok, 1 failed, 2 not applicable, 6 already finished"``: the statuses of the cells
    that ran now (ok and failed always, when any ran) and the cells finished before."""
    ok, failed, skipped = (int(counts.get(s, 0)) for s in ("ok", "failed", "skipped"))
    parts = [f"{ok} ok", f"{failed} failed"] if ok + failed + skipped else []
    if skipped:
        parts.append(f"{skipped} not applicable")
    if finished_before or not parts:
        parts.append(f"{finished_before} already finished")
    return ", ".join(parts)
