"""A rich progress bar for the forward pass: images done, images/s and time remaining."""

from __future__ import annotations

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


@contextmanager
def progress_bar(
    description: str, total: int, completed: int = 0, enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n_images)``; a no-op when ``enabled`` is False."""
    if not enabled:
        yield lambda n: None
        return
    with Progress(*image_columns()) as bar:
        task = bar.add_task(description, total=total, completed=completed)
        yield lambda n: bar.advance(task, n)
