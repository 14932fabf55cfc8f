"""How an extraction is cut into shards, the unit of crash recovery (and of distribution).

Shard ``k`` is the fixed range of source positions ``[k * size, min((k + 1) * size, n))``. The
size is decided once, when an extraction starts, and recorded in the cache entry's manifest; a
resumed run (or another worker on the same entry) keeps it, so its batches, and therefore its
numbers, are those of the run it continues.

With ``shard_size=None`` the size is measured rather than fixed: the first batch of shard 0 is
run on its own and timed (its output is kept as the start of shard 0), then

    seconds_per_image = seconds of that batch / its images
    size = min(SHARD_BYTES / bytes_per_row,
               max(SHARD_SECONDS / seconds_per_image, n / MAX_SHARDS))

rounded down to whole batches (at least one). So a kill loses about ``SHARD_SECONDS`` of work
at most (10 s: a run killed 30 s in keeps two or three shards; the first batch carries the
warm-up, so the estimate errs towards smaller shards), except on sources so long that shards
grow to keep their number near ``MAX_SHARDS`` (the manifest is rewritten after every shard); and
a shard never holds more than about ``SHARD_BYTES`` of arrays in memory (feature maps are
large), which wins over both. Because the size is a whole number of batches, every batch is
``[j * batch_size, (j + 1) * batch_size)`` whatever the shard size: the same batches as a pass
without the cache.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from oodbench.errors import InvalidInputError

if TYPE_CHECKING:
    from oodbench.extract.forward import Chunk, ForwardPass

#: target seconds of work per shard (what a kill may lose)
SHARD_SECONDS = 10.0
#: most bytes of per-row arrays a shard holds in memory before it is written
SHARD_BYTES = 256 * 2**20
#: a source is cut into at most about this many shards (when the bytes allow)
MAX_SHARDS = 256
#: batches per shard when nothing is measured (an extraction that is not cached)
UNMEASURED_BATCHES = 16


def check_shard_size(shard_size: int | None) -> int | None:
    """``shard_size`` when it is a positive integer or ``None`` (measured); else an error."""
    if shard_size is None:
        return None
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise InvalidInputError(
            f"shard_size must be a positive number of images, or None to size shards by time "
            f"and memory (about {SHARD_SECONDS:.0f} s and {SHARD_BYTES >> 20} MiB); got {shard_size!r}"
        )
    return shard_size


def measured_shard_size(
    n: int, batch_size: int, seconds_per_image: float, bytes_per_row: float
) -> int:
    """The shard size for ``n`` images from the timed first batch (see the module docstring)."""
    by_time = SHARD_SECONDS / seconds_per_image if seconds_per_image > 0 else math.inf
    by_bytes = SHARD_BYTES / bytes_per_row if bytes_per_row > 0 else math.inf
    size = min(by_bytes, max(by_time, n / MAX_SHARDS))
    batches = min(int(size // batch_size), math.ceil(n / batch_size))
    return max(batches, 1) * batch_size


def measure_shard_size(run: ForwardPass) -> tuple[int, Chunk, dict[str, Any]]:
    """Run and time the first batch of ``run``; the shard size it implies (see the module
    docstring), the batch's output (the start of shard 0) and the record kept in the manifest."""
    n = len(run.source)
    images = min(run.batch_size, n)
    tic = time.perf_counter()
    ((_, arrays, skipped),) = replace(run, progress=False).shards([(0, 0, images)], 0)
    seconds = time.perf_counter() - tic
    rows = len(arrays["source_indices"])
    bytes_per_row = sum(a.nbytes for a in arrays.values()) / rows if rows else 0.0
    size = measured_shard_size(n, run.batch_size, seconds / images, bytes_per_row)
    sizing = {"first_batch_images": images, "first_batch_s": seconds,
              "bytes_per_row": bytes_per_row, "target_s": SHARD_SECONDS,
              "target_bytes": SHARD_BYTES}
    return size, (arrays, skipped), sizing


def shard_bounds(n: int, shard_size: int) -> list[tuple[int, int, int]]:
    """``(index, start, stop)`` of every shard of ``n`` source positions."""
    return [(k, lo, min(lo + shard_size, n)) for k, lo in enumerate(range(0, n, shard_size))]
