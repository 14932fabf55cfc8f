"""The forward pass itself: one DataLoader over the shards to compute, yielding each complete shard.

Batches never cross a shard boundary, so a shard's rows come from the same batches whether the
run is fresh or resumed. Each batch runs under ``torch.inference_mode`` (and autocast when
asked), its outputs are copied to the host as float32 (feature maps optionally float16) and
checked: the logits must have ``model.num_classes`` columns and be finite.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oodbench.data.source import Source
from oodbench.errors import ClassCountMismatchError, NonFiniteError
from oodbench.extract.loader import (
    LoadedBatch,
    make_loader,
    plan_batches,
    skipped_records,
    to_device,
)
from oodbench.extract.progress import progress_bar
from oodbench.extract.runtime import autocast, place_model, precision_name, uses_channels_last
from oodbench.models.classifier import Classifier

#: the output of one or more batches: per-row arrays and the skipped-image records
Chunk = tuple[dict[str, np.ndarray], list[dict[str, Any]]]


def fresh_timings() -> dict[str, float]:
    """The counters of a pass: seconds loading, in the model and writing, and images done."""
    return {"data_s": 0.0, "forward_s": 0.0, "write_s": 0.0, "images": 0}


@dataclass
class ForwardPass:
    """The settings of one forward pass and the generator that runs it."""

    model: Classifier
    source: Source
    capture: tuple[str, ...]
    batch_size: int
    device: torch.device
    amp_dtype: torch.dtype | None
    num_workers: int | str
    feature_map_dtype: torch.dtype
    progress: bool
    timings: dict[str, float] = field(default_factory=fresh_timings)

    @property
    def channels_last(self) -> bool:
        return uses_channels_last(self.model, self.device, self.amp_dtype)

    def shards(
        self, todo: Sequence[tuple[int, int, int]], done: int
    ) -> Iterator[tuple[int, dict[str, np.ndarray], list[dict[str, Any]]]]:
        """Run the shards ``(index, start, stop)`` in ``todo``; yield ``(index, arrays, skipped)``
        as each completes. ``done`` images are already in the cache (for the progress bar)."""
        owners, batches, last = [], [], []
        for index, lo, hi in todo:
            chunks = plan_batches(np.arange(lo, hi, dtype=np.int64), self.batch_size)
            batches += chunks
            owners += [index] * len(chunks)
            last += [False] * (len(chunks) - 1) + [True]
        loader = make_loader(
            self.source, self.model.transform, batches, device=self.device,
            num_workers=self.num_workers,
        )
        ids = self.source.ids
        was_training = self.model.training
        self.model.eval()
        place_model(self.model, self.device, self.channels_last)
        outputs: list[dict[str, np.ndarray]] = []
        failed: list[tuple[int, str]] = []
        description = f"extract {self.model.spec} on {self.source.name}"
        try:
            with progress_bar(description, len(self.source), done, self.progress) as advance:
                batch_iter = iter(loader)
                for index, is_last in zip(owners, last):
                    tic = time.perf_counter()
                    batch: LoadedBatch = next(batch_iter)
                    toc = time.perf_counter()
                    self.timings["data_s"] += toc - tic
                    failed += batch.failed
                    if batch.images is not None:
                        outputs.append(self._forward(batch, ids))
                        self.timings["forward_s"] += time.perf_counter() - toc
                        self.timings["images"] += len(batch.indices)
                    advance(len(batch.indices) + len(batch.failed))
                    if is_last:
                        yield index, stack_outputs(outputs), skipped_records(self.source, ids, failed)
                        outputs, failed = [], []
        finally:
            self.model.train(was_training)

    def _forward(self, batch: LoadedBatch, ids: Sequence[str]) -> dict[str, np.ndarray]:
        assert batch.images is not None
        x = to_device(batch.images, self.device, self.channels_last)
        with torch.inference_mode(), autocast(self.device, self.amp_dtype):
            out = self.model.forward_all(x, self.capture)
        arrays = {"source_indices": batch.indices}
        for name, tensor in out.items():
            dtype = self.feature_map_dtype if name == "feature_map" else torch.float32
            arrays[name] = np.ascontiguousarray(tensor.to(dtype).cpu().numpy())
        self._check(arrays, batch.indices, ids)
        return arrays

    def _check(self, arrays: dict[str, np.ndarray], rows: np.ndarray, ids: Sequence[str]) -> None:
        logits, spec, name = arrays["logits"], self.model.spec, self.source.name
        if logits.ndim != 2 or logits.shape[1] != self.model.num_classes:
            raise ClassCountMismatchError(
                f"model {spec!r} says num_classes={self.model.num_classes} but its logits have "
                f"shape {tuple(logits.shape)}; the adapter's num_classes must match its head"
            )
        bad = np.flatnonzero(~np.isfinite(logits).all(axis=1))
        if bad.size:
            fix = (
                f"the pass ran in {precision_name(self.amp_dtype)} autocast: rerun with "
                "amp='off' (float32)" if self.amp_dtype is not None else
                "check the checkpoint for NaN weights and these images for degenerate content"
            )
            raise NonFiniteError(
                f"model {spec!r} produced NaN/inf logits for {bad.size} image(s) of source "
                f"{name!r}: {[ids[rows[i]] for i in bad[:5]]}; {fix}. Shards completed before "
                "this batch are kept in the cache."
            )
        fmap = arrays.get("feature_map")
        if fmap is not None and fmap.dtype == np.float16 and not np.isfinite(fmap).all():
            raise NonFiniteError(
                f"the feature map of model {spec!r} on source {name!r} overflows float16 (or is "
                "NaN); extract with feature_map_dtype='float32'"
            )


def stack_outputs(outputs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate batch outputs; an all-unreadable shard has only empty source_indices."""
    if not outputs:
        return {"source_indices": np.empty(0, dtype=np.int64)}
    return {name: np.concatenate([o[name] for o in outputs]) for name in outputs[0]}
