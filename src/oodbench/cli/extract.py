"""``oodbench extract MODEL_SPEC PATH``: cache one forward pass over an image folder."""

from __future__ import annotations

import click
import numpy as np
from rich.table import Table

from oodbench.cli.cache import human_bytes
from oodbench.cli.tables import console


def _workers(value: str) -> int | str:
    return value if value == "auto" else int(value)


@click.command("extract")
@click.argument("model_spec")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--capture", "-c", multiple=True, default=("logits", "features"), show_default=True,
    help="logits, features, feature_map (repeat or comma-separate)",
)
@click.option("--batch-size", "-b", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N")
@click.option("--amp", default="auto", show_default=True,
              type=click.Choice(["auto", "off", "bf16", "fp16"]))
@click.option("--workers", "num_workers", default="auto", show_default=True,
              help="DataLoader workers (auto: 0 on CPU, up to 16 on CUDA)")
@click.option("--feature-map-dtype", default="float32", show_default=True,
              type=click.Choice(["float32", "float16"]))
@click.option("--pretrained/--random-init", default=True, show_default=True,
              help="pretrained weights, or random ones (seeded: the same on every run)")
@click.option("--weights", type=click.Path(exists=True, dir_okay=False), default=None,
              help="a local checkpoint (loaded with weights_only=True / safetensors)")
@click.option("--shard-size", type=click.IntRange(min=1), default=None,
              help="images per shard, the unit a kill can lose (default: measured, about 10 s "
                   "of work and at most 256 MiB)")
@click.option("--repair", is_flag=True,
              help="delete a damaged cache entry (checksum mismatch) and extract again")
@click.option("--no-progress", is_flag=True, help="no progress bar")
def extract_cmd(
    model_spec: str,
    path: str,
    capture: tuple[str, ...],
    batch_size: int,
    device: str,
    amp: str,
    num_workers: str,
    feature_map_dtype: str,
    pretrained: bool,
    weights: str | None,
    shard_size: int | None,
    repair: bool,
    no_progress: bool,
) -> None:
    """Run MODEL_SPEC (e.g. timm:resnet50) once over the image folder PATH and cache the result.

    PATH holds one sub-folder per class (ImageFolder; folders named by the model's classes, such
    as ImageNet wnids, get those class indices as labels), or images (in PATH or PATH/images)
    listed with their labels in PATH/labels.txt, or ImageNet validation images with their
    labels, or only images (unlabelled OOD images, as `oodbench run` reads an OOD group's
    folder: the run reuses this extraction). A second run is a cache hit.
    """
    import torch

    from oodbench.data import open_folder
    from oodbench.data.labels import warn_if_chance_accuracy
    from oodbench.extract import extract
    from oodbench.models import load

    names = tuple(n.strip() for c in capture for n in c.split(",") if n.strip())
    if not pretrained:
        torch.manual_seed(0)  # random weights, but the same ones each run (so the cache hits)
    model = load(model_spec, pretrained=pretrained, weights=weights)
    source = open_folder(path, flat_ood=True)
    acts = extract(
        model, source, capture=names, batch_size=batch_size, device=device, amp=amp,
        num_workers=_workers(num_workers), feature_map_dtype=feature_map_dtype,
        shard_size=shard_size, repair=repair, progress=not no_progress,
    )
    meta = acts.meta
    table = Table(title=f"{model_spec} on {source.name}", show_header=False)
    table.add_column()
    table.add_column(overflow="fold")  # long keys and paths wrap, never end in "..."
    table.add_row("cache key", meta["cache_key"])
    table.add_row("cache", _cache_state(meta))
    table.add_row("rows", f"{len(acts)} of {meta['n_source']} images")
    table.add_row("skipped", str(len(meta["skipped"])))
    for name in ("logits", "features", "feature_map"):
        array = getattr(acts, name)
        if array is not None:
            table.add_row(name, f"{tuple(array.shape)} {array.dtype} ({human_bytes(array.nbytes)})")
    labels = np.asarray(acts.labels)
    if meta["label_mapping"]:
        table.add_row("labels", f"{len(meta['label_mapping'])} classes of {type(source).__name__} "
                                "mapped onto the model's class indices")
    if (labels >= 0).any():
        accuracy = float(acts.correct[labels >= 0].mean())
        table.add_row("top-1 accuracy", f"{accuracy:.4f} ({int((labels >= 0).sum())} labelled images)")
        warn_if_chance_accuracy(accuracy, labels, where=f"{model_spec} on {source.name!r}")
    table.add_row("precision", f"{meta['precision']} on {meta['device']}")
    timings = meta["timings"]
    if not meta["cache_hit"] and timings.get("images"):
        table.add_row("speed", f"{timings['images'] / timings['total_s']:.1f} images/s")
    table.add_row("path", str(meta["cache_path"]))
    console().print(table)  # not squeezed to 80 columns when piped: whole keys and paths


def _cache_state(meta: dict) -> str:
    """The cache row: a hit, a new entry, or a resumed one with how many images came from where."""
    if meta["cache_hit"]:
        return "hit (no forward pass)"
    if not meta["n_cached"]:
        return f"written ({meta['n_computed']} images computed)"
    return (f"written, resumed: {meta['n_cached']} images read from the cache, "
            f"{meta['n_computed']} computed")
