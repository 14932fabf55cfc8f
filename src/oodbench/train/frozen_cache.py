"""The outputs of a network's frozen early layers, computed once per training image and kept on
disk, so that training runs only the layers after them (NPOS: CLIP's vision blocks 0-9).

    <folder>/tokens.npy      (N, *shape) memory-mapped array, row i = training row i
    <folder>/meta.json       the key (what decides the values) and the shape and dtype
    <folder>/rank<r>.json    how many chunks rank r has written, and its unreadable images

Each rank fills its contiguous share of the rows in chunks; after each chunk the array is
flushed and the rank's progress file replaced atomically, so a killed run goes on from the last
written chunk. A different key (other weights, images, transform or split point) starts the
folder again. Unreadable images are recorded and left out of training.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from oodbench.atomic_files import read_json, write_json
from oodbench.data.source import Source
from oodbench.extract.loader import make_loader, to_device
from oodbench.train import ddp

TOKENS, META = "tokens.npy", "meta.json"


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def frozen_outputs(
    folder: Path, key: str, source: Source, rows: np.ndarray, load: Callable[..., torch.Tensor],
    early: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...], dtype: np.dtype[Any],
    *, device: torch.device, batch_size: int, num_workers: int | str, world: int, rank: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(outputs, ok)``: the (len(rows), *shape) array of ``early(image)`` for the source
    positions ``rows`` (sorted), read-only and memory-mapped, and which rows loaded."""
    meta = {"key": key, "shape": [len(rows), *shape], "dtype": np.dtype(dtype).str}
    if rank == 0:
        if not (folder / META).is_file() or read_json(folder / META) != meta:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            np.lib.format.open_memmap(folder / TOKENS, mode="w+", dtype=dtype,
                                      shape=(len(rows), *shape)).flush()
            write_json(folder / META, meta)
    _barrier()
    mine = ddp.share(np.arange(len(rows)), world, rank)
    chunks = ddp.batches(mine, batch_size)
    progress_file = folder / f"rank{rank}.json"
    if not progress_file.is_file():
        write_json(progress_file, {"chunks": 0, "failed": []})
    progress = read_json(progress_file)
    if progress["chunks"] < len(chunks):
        array = np.load(folder / TOKENS, mmap_mode="r+")
        todo = chunks[progress["chunks"]:]
        loader = make_loader(source, load, [rows[c] for c in todo], device=device,
                             num_workers=num_workers)
        with torch.no_grad():
            for batch in loader:
                progress["failed"] += [int(p) for p, _ in batch.failed]
                if batch.images is not None:
                    out = early(to_device(batch.images, device, channels_last=False))
                    array[np.searchsorted(rows, batch.indices)] = out.float().cpu().numpy()
                array.flush()
                progress["chunks"] += 1
                write_json(progress_file, progress)
        del array
    _barrier()
    failed: list[int] = []
    for r in range(world):
        failed += read_json(folder / f"rank{r}.json")["failed"]
    ok = ~np.isin(rows, np.asarray(failed, dtype=np.int64))
    return np.load(folder / TOKENS, mmap_mode="r"), ok
