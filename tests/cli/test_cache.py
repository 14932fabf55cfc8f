"""``oodbench cache ls | rm | verify``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from oodbench.cli.cache import human_bytes
from oodbench.cli.main import main
from oodbench.extract import extract, list_cache
from tests.extract._toy import RandomImages, TinyNet

WIDE = {"COLUMNS": "200"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))


def test_ls_verify_rm_round_trip():
    key = extract(TinyNet(), RandomImages(5, name="fives"), progress=False).meta["cache_key"]
    runner = CliRunner()
    listed = runner.invoke(main, ["cache", "ls"], env=WIDE)
    assert listed.exit_code == 0, listed.output
    assert "fives" in listed.output and "5/5" in listed.output
    assert "1 entries" in listed.output
    checked = runner.invoke(main, ["cache", "verify", key[:8]], env=WIDE)
    assert checked.exit_code == 0 and "ok" in checked.output
    removed = runner.invoke(main, ["cache", "rm", key[:8]])
    assert removed.exit_code == 0 and key in removed.output
    assert list_cache() == []


def test_ls_prints_whole_keys_when_piped():
    """Not a terminal (CliRunner, a pipe): tab-separated lines with the whole 64-digit keys."""
    key = extract(TinyNet(), RandomImages(5, name="fives"), progress=False).meta["cache_key"]
    listed = CliRunner().invoke(main, ["cache", "ls"])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["key", "model", "source"]
    assert lines[1].split("\t")[:3] == [key, "test:tinynet-3-8", "fives"]
    assert len(key) == 64


def test_verify_fails_on_a_damaged_entry():
    acts = extract(TinyNet(), RandomImages(3), progress=False)
    logits = Path(acts.meta["cache_path"]) / "logits.npy"
    del acts
    logits.write_bytes(logits.read_bytes()[:-4])
    result = CliRunner().invoke(main, ["cache", "verify"], env=WIDE)
    assert result.exit_code == 1
    assert "logits.npy does not match its checksum" in result.output
    assert "oodbench cache rm KEY" in result.output


def test_rm_of_an_unknown_key_is_a_friendly_error():
    result = CliRunner().invoke(main, ["cache", "rm", "feedface"])
    assert result.exit_code == 2 and "unknown cache entry 'feedface'" in result.output


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 2**30)] == [
        "0 B", "1023 B", "1.5 KiB", "5.0 GiB"
    ]
