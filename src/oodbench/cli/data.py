"""``oodbench data list | info NAME | check NAME PATH | download NAME DIR``: the dataset catalogue."""

from __future__ import annotations

import sys

import click

from oodbench.cli.tables import show, table_options


@click.group("data")
def data_cmd() -> None:
    """The dataset catalogue: what each dataset looks like, where to get it, check a copy."""


@data_cmd.command("list")
@table_options
def list_datasets(fmt: str | None, wide: bool) -> None:
    """List the catalogue's datasets."""
    import pandas as pd

    from oodbench.data import catalog

    rows = []
    for name in catalog.available():
        info = catalog.get(name)
        if info.num_images is not None:
            images = f"{info.num_images:,}"
        elif info.image_lists:  # lines of each image list ("?" where unknown)
            images = " / ".join(f"{lst.count:,}" if lst.count else "?" for lst in info.image_lists)
        else:
            images = "?"
        classes = f"{info.num_classes:,}" if info.num_classes is not None else "-"
        rows.append((name, images, classes, info.layout, info.title))
    show(pd.DataFrame(rows, columns=["name", "images", "classes", "layout", "title"]), fmt,
         title="datasets (oodbench data info NAME for details)", key=("name",),
         drop_first=("title",), wide=wide)


@data_cmd.command("info")
@click.argument("name")
def info_cmd(name: str) -> None:
    """Layout, counts, checksums, licence and where to get dataset NAME."""
    from oodbench.data import catalog

    click.echo(catalog.get(name).describe())


@data_cmd.command("check")
@click.argument("name")
@click.argument("path", type=click.Path())
@click.option(
    "--sample",
    type=click.IntRange(min=0),
    default=None,
    help="decode only a random sample of this many images (0: none); default: all",
)
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the sample")
def check_cmd(name: str, path: str, sample: int | None, seed: int) -> None:
    """Check the copy of dataset NAME at PATH: layout, counts, missing and corrupt files.

    Prints what is wrong and how to fix it; exits with status 1 when anything is wrong.
    """
    from oodbench.data.check import check

    report = check(name, path, sample=sample, seed=seed)
    click.echo(report.summary())
    if not report.ok:
        sys.exit(1)


@data_cmd.command("download")
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--no-extract", is_flag=True, help="keep the archives, do not extract them")
@click.option(
    "--allow-unverified",
    is_flag=True,
    help="also download archives with no known checksum (check the result with `data check`)",
)
def download_cmd(name: str, directory: str, no_extract: bool, allow_unverified: bool) -> None:
    """Download dataset NAME's public archives into DIRECTORY (checksummed, resumable).

    pooch logs a line on stderr as each file starts (and before each retry); on a terminal the
    MiB done are redrawn there too.
    """
    from oodbench.data import catalog
    from oodbench.data.download import download_dataset

    def report(item: catalog.Download, done: int, total: int | None) -> None:
        share = f" / {total / 2**20:,.0f}" if total else ""
        click.echo(f"\r{item.filename}: {done / 2**20:,.0f}{share} MiB", nl=False, err=True)

    terminal = sys.stderr.isatty()
    paths = download_dataset(
        catalog.get(name),
        directory,
        unpack=not no_extract,
        allow_unverified=allow_unverified,
        progress=report if terminal else None,
    )
    if terminal:
        click.echo("", err=True)
    info = catalog.get(name)
    for item, path in zip(info.public_downloads, paths):
        state = "checksum verified" if item.has_checksum else "NO checksum known: run `data check`"
        click.echo(f"downloaded {path} ({state})")
