"""A rich progress bar for the forward pass: images done, images/s and time remaining.

On a terminal the bar redraws itself; when stderr is not a terminal (a log file, a pipe, CI) a
redrawn bar would be written out line after line and wrap, so :class:`StageLines` prints one
line when a stage starts and one when it ends instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class ImagesPerSecondColumn(ProgressColumn):
    """The throughput rich estimates over the last seconds, as ``123.4 img/s``."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("- img/s" if speed is None else f"{speed:,.1f} img/s", style="progress.data.speed")


def image_columns(*extra: ProgressColumn) -> tuple[ProgressColumn, ...]:
    """Description, bar, done/total, images/s, then ``extra`` (e.g. a loss), elapsed and ETA."""
    return (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        ImagesPerSecondColumn(),
        *extra,
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


def interactive() -> bool:
    """Whether progress goes to a terminal (stderr), where a bar can redraw itself."""
    return sys.stderr.isatty()


class StageLines:
    """Progress as plain lines on stderr: ``<description>: <total> images ...`` when the stage
    starts and ``<description>: <done> of <total> images, <t> s (<rate> img/s)`` when it ends
    (``done`` counts the ``completed`` images from before the stage: a resumed extraction)."""

    def __init__(self, description: str, total: int, completed: int = 0):
        self.description, self.total, self.completed, self.done = description, total, completed, 0
        print(f"{description}: {total} images ...", file=sys.stderr, flush=True)
        self._start = time.perf_counter()

    def advance(self, n: int) -> None:
        self.done += n

    def close(self, extra: str = "") -> None:
        seconds = time.perf_counter() - self._start
        rate = f" ({self.done / seconds:,.1f} img/s)" if seconds > 0 and self.done else ""
        print(f"{self.description}: {self.completed + self.done} of {self.total} images, "
              f"{seconds:.1f} s{rate}{extra}", file=sys.stderr, flush=True)


@contextmanager
def progress_bar(
    description: str, total: int, completed: int = 0, enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n_images)``; a no-op when ``enabled`` is False; lines per stage
    (:class:`StageLines`) when stderr is not a terminal."""
    if not enabled:
        yield lambda n: None
        return
    if not interactive():
        lines = StageLines(description, total, completed)
        yield lines.advance
        lines.close()
        return
    with Progress(*image_columns()) as bar:
        task = bar.add_task(description, total=total, completed=completed)
        yield lambda n: bar.advance(task, n)
