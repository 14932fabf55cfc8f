"""The README's quick tour: every command runs as written on a fresh copy of the examples."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def quick_tour() -> list[str]:
    """The commands of the README's quick tour: the first ```bash block under "## Quick tour",
    one per line, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick tour\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "no ```bash block under ## Quick tour"
    commands = [line.split(" #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c and not c.startswith("#")]


def test_the_quick_tour_names_only_oodbench_commands_on_shipped_files() -> None:
    """Cheap guard for every run (the heavy test below runs them): each line is one oodbench
    command (no "a | b" alternatives), and every examples/ path it names ships."""
    commands = quick_tour()
    assert len(commands) >= 10
    for command in commands:
        args = shlex.split(command)
        assert args[0] == "oodbench" and "|" not in args, command
        for arg in args:
            if arg.startswith("examples/") and not arg.startswith("examples/out"):
                assert (REPO / arg).exists(), f"{command}: {arg} does not ship"


@pytest.mark.heavy
def test_every_quick_tour_command_runs_on_a_fresh_copy_of_the_examples(tmp_path: Path) -> None:
    """Issue 23 item 1: `oodbench train examples/train_tiny.toml` and `oodbench run
    examples/tiny_experiment.toml --dry-run` stopped at "examples/data/id_train does not
    exist"; now every command of the quick tour runs, in order, in a fresh folder holding only
    a copy of examples/ (as a fresh clone has it)."""
    shutil.copytree(REPO / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("out"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OODBENCH_CACHE": str(tmp_path / "cache"),
           "COLUMNS": "200"}
    for command in quick_tour():
        args = shlex.split(command)
        done = subprocess.run([sys.executable, "-m", "oodbench", *args[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    out = tmp_path / "examples" / "out"
    assert (out / "results.parquet").is_file() and (out / "report.html").is_file()
    assert (tmp_path / "oodbench-demo" / "report.html").is_file()
    assert (tmp_path / "vit.png").is_file() and (tmp_path / "findings" / "findings.md").is_file()
    assert list(tmp_path.glob("rank*.png"))
    assert list((tmp_path / "cache" / "train").iterdir())  # the trained model
