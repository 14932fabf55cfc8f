"""``python -m oodbench`` is the ``oodbench`` command."""

from __future__ import annotations

import os
import subprocess
import sys

from oodbench import __version__
from tests.conftest import REPO


def test_python_dash_m_runs_the_cli():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "oodbench", "--version"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"oodbench, version {__version__}"
    bad = subprocess.run([sys.executable, "-m", "oodbench", "cache", "rm", "no-such-key"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: "), bad.stderr
