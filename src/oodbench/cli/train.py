"""``oodbench train CONFIG.toml``: train (or fine-tune) a classifier with an OOD-aware loss."""

from __future__ import annotations

from pathlib import Path

import click

from oodbench.cli.tables import console


@click.command("train")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def train_cmd(config: Path, no_progress: bool) -> None:
    """Train the model of a training config (format: oodbench.train.config).

    Checkpoints every epoch under the config's output (default: the training cache, keyed by
    the config's content); run it again to resume an interrupted run, or to get the finished
    one at once. Use the result with models.load(spec, weights=...) or, in an experiment,
    [[models]] train = "CONFIG.toml".
    """
    from rich.table import Table

    from oodbench.run.build import run_training
    from oodbench.train.config import read_train_config

    con = console()
    parsed = read_train_config(config)
    result = run_training(parsed, progress=not no_progress)
    table = Table(title=f"{parsed.train.name or config.name}: {parsed.model.name} with loss "
                        f"{parsed.train.loss}")
    for column in ("epoch", "loss", "images", "images/s", "skipped"):
        table.add_column(column, justify="right")
    for h in result.history:
        speed = h.get("images_per_s")
        table.add_row(str(h["epoch"]), f"{h['loss']:.4f}", str(h["images"]),
                      "-" if speed is None else f"{speed:,.1f}", str(h["skipped"]))
    con.print(table)
    con.print(f"{result.describe_start()} in {result.out}", markup=False)
    con.print(f"weights: [bold]{result.weights}[/]  (config and history: {result.out / 'train.json'})")
