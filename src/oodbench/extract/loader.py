"""The DataLoader machinery shared by ``extract`` and the live-model detectors (ODIN, MC-dropout).

A torch ``Dataset`` wraps a :class:`~oodbench.data.source.Source` and the model's own
``transform``. An image that cannot be loaded or transformed does not raise: it comes back as a
failure record, the collate function drops it from the batch and reports it, and the run goes
on. Batches are given explicitly (a list of index lists), so the order is deterministic and a
batch never crosses a cache-shard boundary. On CUDA the batches are pinned and copied
asynchronously.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from oodbench.data.source import Source
from oodbench.errors import InvalidInputError
from oodbench.extract.runtime import place_model, resolve_device, resolve_num_workers
from oodbench.models.classifier import Classifier


class SkippedImagesWarning(UserWarning):
    """Some images of a source could not be read and were skipped (listed in the warning)."""


class LoadedBatch(NamedTuple):
    """One collated batch: the images that loaded, their source positions, the failures."""

    images: torch.Tensor | None  # (B, 3, H, W); None when every image of the batch failed
    indices: np.ndarray  # (B,) int64 positions in the source
    failed: list[tuple[int, str]]  # (source position, reason)


class _Failure(NamedTuple):
    position: int
    reason: str


class SourceDataset(Dataset):
    """``source.load(i)`` followed by ``transform``; a failure is returned, never raised.

    Any exception while reading or transforming one image (``CorruptImageError``, ``OSError``
    for a truncated file, PIL's decoder errors) becomes a failure record, so one bad file
    cannot end a long run; the reason is kept for the report.
    """

    def __init__(self, source: Source, transform: Callable[[Any], torch.Tensor]):
        self.source = source
        self.transform = transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | _Failure:
        try:
            return self.transform(self.source.load(index)), index
        except Exception as err:  # any unreadable image is skipped and reported
            return _Failure(index, f"{type(err).__name__}: {err}")


def collate_skipping_failures(items: Sequence[tuple[torch.Tensor, int] | _Failure]) -> LoadedBatch:
    """Stack the images that loaded; report the others instead of failing the batch."""
    loaded = [item for item in items if not isinstance(item, _Failure)]
    failed = [(item.position, item.reason) for item in items if isinstance(item, _Failure)]
    indices = np.array([index for _, index in loaded], dtype=np.int64)
    if not loaded:
        return LoadedBatch(None, indices, failed)
    tensors = [tensor for tensor, _ in loaded]
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise InvalidInputError(
            f"the model's transform produced images of different shapes {sorted(shapes)}; "
            "it must resize/crop every image to one size (e.g. end with a CenterCrop)"
        )
    return LoadedBatch(torch.stack(tensors), indices, failed)


def make_loader(
    source: Source,
    transform: Callable[[Any], torch.Tensor],
    batches: Sequence[Sequence[int] | np.ndarray],
    *,
    device: torch.device,
    num_workers: int | str = "auto",
) -> DataLoader:
    """A DataLoader that yields one :class:`LoadedBatch` per entry of ``batches``, in order."""
    workers = resolve_num_workers(num_workers, device, len(batches))
    return DataLoader(
        SourceDataset(source, transform),
        batch_sampler=[list(map(int, b)) for b in batches],
        num_workers=workers,
        collate_fn=collate_skipping_failures,
        pin_memory=device.type == "cuda",
    )


def to_device(images: torch.Tensor, device: torch.device, channels_last: bool) -> torch.Tensor:
    """Move a (pinned) CPU batch to ``device``; optionally in channels-last memory format."""
    images = images.to(device, non_blocking=device.type == "cuda")
    return images.contiguous(memory_format=torch.channels_last) if channels_last else images


def check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive integer; got {batch_size!r}")


def plan_batches(indices: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive chunks of ``indices`` of at most ``batch_size``."""
    check_batch_size(batch_size)
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


def skipped_summary(source: Source, skipped: Sequence[dict[str, Any]], shown: int = 5) -> str:
    """One readable paragraph about the images that were skipped."""
    head = "; ".join(f"{s['id']} ({s['reason']})" for s in skipped[:shown])
    more = f"; and {len(skipped) - shown} more" if len(skipped) > shown else ""
    return (
        f"skipped {len(skipped)} of {len(source)} images of source {source.name!r} that could "
        f"not be read: {head}{more}. They are absent from the results; fix or remove the files "
        "and the next run re-extracts (the source fingerprint changes)."
    )


def warn_skipped(source: Source, skipped: Sequence[dict[str, Any]]) -> None:
    """Print the skipped-images summary once (a :class:`SkippedImagesWarning`)."""
    if skipped:
        warnings.warn(skipped_summary(source, skipped), SkippedImagesWarning, stacklevel=3)


def skipped_records(
    source: Source, source_ids: Sequence[str], failed: list[tuple[int, str]]
) -> list[dict[str, Any]]:
    """``{"index", "id", "reason"}`` per failure, plus ``"path"`` when the source has files
    (``source.path(i)``, as ``ImageFolder`` and ``ImageList`` have); ids of file sources are
    their relative paths."""
    path = getattr(source, "path", None)
    records = []
    for i, reason in failed:
        record: dict[str, Any] = {"index": int(i), "id": str(source_ids[i]), "reason": reason}
        if callable(path):
            record["path"] = str(path(i))
        records.append(record)
    return records


def iterate_batches(
    model: Classifier,
    source: Source,
    *,
    batch_size: int = 64,
    device: str | torch.device = "auto",
    num_workers: int | str = "auto",
    indices: Sequence[int] | np.ndarray | None = None,
) -> Iterator[tuple[torch.Tensor, np.ndarray]]:
    """Transformed image batches of ``source`` on ``device``, for detectors that need the model.

    Yields ``(images, positions)``: a float tensor (B, 3, H, W) made by ``model.transform`` and
    the int64 positions of its rows in ``source``. Images that cannot be read are skipped (the
    batch is smaller; a batch with no readable image is not yielded) and summarised once in a
    :class:`SkippedImagesWarning` at the end. The order is ``indices`` (default: all of the
    source, in order). ``device="auto"`` is CUDA when available, else CPU; the model is moved
    there, its train/eval mode is left as it is (MC-dropout needs train mode, ODIN gradients).
    """
    dev = resolve_device(device)
    order = np.arange(len(source), dtype=np.int64) if indices is None else np.asarray(indices)
    if order.ndim != 1 or (order.size and not np.issubdtype(order.dtype, np.integer)):
        raise InvalidInputError("indices must be a 1-D sequence of integer source positions")
    if order.size and (order.min() < 0 or order.max() >= len(source)):
        raise InvalidInputError(
            f"indices must lie in [0, {len(source)}) for source {source.name!r}; "
            f"got min {order.min()}, max {order.max()}"
        )
    place_model(model, dev)
    batches = plan_batches(order.astype(np.int64), batch_size)
    loader = make_loader(source, model.transform, batches, device=dev, num_workers=num_workers)
    ids = source.ids
    skipped: list[dict[str, Any]] = []
    try:
        for batch in loader:
            skipped += skipped_records(source, ids, batch.failed)
            if batch.images is not None:
                yield to_device(batch.images, dev, channels_last=False), batch.indices
    finally:
        warn_skipped(source, skipped)
