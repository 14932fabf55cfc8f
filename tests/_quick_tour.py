"""The README's quick tour, read from README.md and run once per test session.

``tests/test_readme.py`` checks that every command runs; ``tests/test_demo.py`` compares its own
in-process ``oodbench demo`` with the quick tour's (another process, a fresh cache: a new
forward pass), so the demo's determinism costs no third run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def quick_tour() -> list[str]:
    """The commands of the README's quick tour: the first ```bash block under "## Quick tour",
    one per line, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick tour\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "no ```bash block under ## Quick tour"
    commands = [line.split(" #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c and not c.startswith("#")]


@dataclass
class QuickTourRun:
    """Where the quick tour ran (a fresh copy of examples/ and a fresh cache under ``folder``)
    and the first command that failed, with its output (``None``: every command ran)."""

    folder: Path
    failure: str | None


def run_quick_tour(folder: Path) -> QuickTourRun:
    """Every quick-tour command, in order, as ``python -m oodbench`` in ``folder`` (holding only
    a copy of examples/, as a fresh clone has it); stops at the first failure."""
    shutil.copytree(REPO / "examples", folder / "examples", ignore=shutil.ignore_patterns("out"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OODBENCH_CACHE": str(folder / "cache"),
           "COLUMNS": "200"}
    for command in quick_tour():
        args = shlex.split(command)
        done = subprocess.run([sys.executable, "-m", "oodbench", *args[1:]], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return QuickTourRun(folder, f"{command} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return QuickTourRun(folder, None)
