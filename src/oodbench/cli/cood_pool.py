"""``oodbench cood-pool build``: the C-OOD class pool from an ImageNet-21k folder."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("cood-pool")
def cood_pool_cmd() -> None:
    """Build the OOD class pool of the C-OOD severity benchmark (Galil et al., ICLR 2023)."""


@cood_pool_cmd.command("build")
@click.option("--imagenet21k", "root", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="ImageNet-21k folder with one sub-folder of images per wnid")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="image list to write (<wnid>/<file> <label>); wnids go to <stem>_classes.txt")
@click.option("--min-images", default=200, show_default=True, type=click.IntRange(min=2),
              help="keep classes with at least this many images, and sample this many")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--exclude", multiple=True,
              help="a wnid, or a file of wnids (one per line), to remove; repeatable")
@click.option("--keep-hierarchy", is_flag=True,
              help="keep WordNet ancestors/descendants of ImageNet-1k classes (removed by default)")
@click.option("--variant", default="goog", show_default=True,
              help="timm's ImageNet-21k class list: goog, 22k, 22k_ms, miil, 12k")
def build_cmd(root: Path, out: Path, min_images: int, seed: int, exclude: tuple[str, ...],
              keep_hierarchy: bool, variant: str) -> None:
    """Select pool classes, sample images per class with a seed and write the image list."""
    from oodbench.data.cood_pool import build_pool

    report = build_pool(root, out=out, min_images=min_images, seed=seed, exclude=exclude,
                        exclude_hierarchy=not keep_hierarchy, variant=variant)
    click.echo(report.summary())
    click.echo(f"wrote {out} and {out.with_name(out.stem + '_classes.txt')}")
