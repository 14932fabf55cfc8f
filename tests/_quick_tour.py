"""The README's quick tour, read from README.md and run once per test session.

``tests/test_readme.py`` checks that every command runs; ``tests/test_demo.py`` compares its own
in-process ``oodbench demo`` with the quick tour's (another process, a fresh cache: a new
forward pass), so the demo's determinism costs no third run.

The whole tour runs in **one** Python process (``python -m tests._quick_tour FOLDER``): each
command is the ``oodbench`` click group called with that command's arguments, as the console
script calls it, so the tour pays one interpreter start and one import of torch instead of one
per command. ``tests/test_main.py`` checks the ``python -m oodbench`` entry point itself.
"""

from __future__ import annotations

import contextlib
import io
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
    """Every quick-tour command, in order, in ``folder`` (holding only a copy of examples/, as a
    fresh clone has it) with a fresh cache; one process for the whole tour (``_run_here``),
    which stops at the first failure."""
    shutil.copytree(REPO / "examples", folder / "examples", ignore=shutil.ignore_patterns("out"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
           "OODBENCH_CACHE": str(folder / "cache"), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "tests._quick_tour"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=1800)
    failure = None if done.returncode == 0 else f"{done.stdout}\n{done.stderr}"
    return QuickTourRun(folder, failure)


def _run_here() -> int:
    """Run the tour in this process and this folder; on the first command whose exit status is
    not 0, print the command, its status and its output, and return 1."""
    from oodbench.cli.main import main

    for command in quick_tour():
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            try:
                main.main(shlex.split(command)[1:], prog_name="oodbench")
                status = 0
            except SystemExit as stop:  # click ends every command with SystemExit
                status = stop.code if isinstance(stop.code, int) else (stop.code is not None)
        if status != 0:
            print(f"{command} -> {status}\n{output.getvalue()}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(_run_here())
