"""Progress output: a bar on a terminal, a line per stage elsewhere (logs, pipes, CI)."""

from __future__ import annotations

from oodbench.extract import extract
from oodbench.extract import progress as progress_module
from tests.extract._toy import RandomImages, TinyNet


def test_without_a_terminal_each_stage_is_one_line(cache_root, monkeypatch, capsys) -> None:
    """Issue 23 item 9: progress bars wrapped into garbage when output was not a terminal."""
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    extract(TinyNet(), RandomImages(12, name="toy"), batch_size=4, progress=True)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0] == "extract test:tinynet-3-8 on toy: 12 images ..."
    assert lines[1].startswith("extract test:tinynet-3-8 on toy: 12 of 12 images, ")
    assert lines[1].endswith(" img/s)")
    assert "━" not in err and "\r" not in err


def test_no_progress_prints_nothing(cache_root, monkeypatch, capsys) -> None:
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    extract(TinyNet(), RandomImages(12, name="toy"), batch_size=4, progress=False)
    assert capsys.readouterr().err == ""
