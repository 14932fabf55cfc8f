"""A rich progress bar for training: images done, images/s, the running loss, time left (lines
per epoch when stderr is not a terminal, see :mod:`oodbench.extract.progress`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import Progress, TextColumn

from oodbench.extract.progress import StageLines, image_columns, interactive


@contextmanager
def training_bar(
    description: str, total: int, completed: int = 0, enabled: bool = True
) -> Iterator[Callable[[int, float], None]]:
    """Yields ``advance(n_images, running_loss)``; a no-op when ``enabled`` is False."""
    if not enabled:
        yield lambda n, loss: None
        return
    if not interactive():  # a line per stage (epoch), not a bar redrawn into a log
        lines, last = StageLines(description, total, completed), ["-"]

        def advance(n: int, loss: float) -> None:
            lines.advance(n)
            last[0] = f"{loss:.4f}"

        yield advance
        lines.close(f", loss {last[0]}")
        return
    with Progress(*image_columns(TextColumn("loss {task.fields[loss]}"))) as bar:
        task = bar.add_task(description, total=total, completed=completed, loss="-")
        yield lambda n, loss: bar.update(task, advance=n, loss=f"{loss:.4f}")
