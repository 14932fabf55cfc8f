"""``oodbench demo``: the offline demo (small CNN on digits, C-OOD and far-OOD, HTML report)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from oodbench.cli.report import print_leaderboards
from oodbench.cli.tables import console


@click.command("demo")
@click.option("--out", type=click.Path(path_type=Path), default=Path("oodbench-demo"),
              show_default=True, help="Folder for the results, the experiment file and the report.")
@click.option("--seed", default=0, show_default=True, help="Seed of the data split, training and benchmark.")
@click.option("--top", default=10, show_default=True, help="Leaderboard rows printed per benchmark.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.option("--no-figures", is_flag=True,
              help="Write the reports without figures: the same tables, a note where each "
                   "figure would be (as `oodbench report --no-figures`); faster.")
def demo_cmd(out: Path, seed: int, top: int, no_progress: bool, no_figures: bool) -> None:
    """Offline demo on data that ships with scikit-learn and scikit-image (about a minute).

    Trains a small CNN on the digits 0-5, runs the C-OOD severity benchmark with the held-out
    digits 6-9 as the OOD class pool (one class per severity level, 4 levels) and far-OOD sets
    (printed letters, photo and texture patches, noise) with every detector that applies, then
    writes results/, report.html and report.md to --out. Then compares training losses
    (CE, LogitNorm, HEM, MM, Dice): the same CNN trained with each, benchmarked with MSP,
    max-logit and energy (--out/losses/).
    """
    from oodbench.demo import run_demo

    con = console()
    start = time.perf_counter()
    con.print(f"oodbench demo (seed {seed}): training a small CNN on digits 0-5 ...")
    result = run_demo(out, seed=seed, progress=not no_progress, figures=not no_figures)
    print_leaderboards(result.results, top=top, fmt="table")
    counts = result.results.drop_duplicates("cell")["status"].value_counts()
    con.print(f"cells: {int(counts.get('ok', 0))} ok, {int(counts.get('failed', 0))} failed, "
              f"{int(counts.get('skipped', 0))} skipped, in {time.perf_counter() - start:.0f} s")
    con.print("[bold]Training losses[/]: the same CNN trained with each loss (model = loss)")
    print_leaderboards(result.loss_results, top=None, fmt="table")
    if result.skipped_detectors:
        con.print(f"not run: {', '.join(result.skipped_detectors)} (need a CLIP model's text "
                  "encoder or a group-softmax head; the demo's CNN has neither)")
    con.print(f"report: [bold]{result.report_html}[/]   re-run: oodbench run {result.out / 'experiment.toml'}")
    con.print(f"losses: [bold]{result.loss_report_html}[/]   re-run: oodbench run "
              f"{result.out / 'losses' / 'experiment.toml'}")
