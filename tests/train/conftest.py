"""Fixtures of the training tests: the one torchrun launch of the two-process tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train._subprocess import REPO, subprocess_env


@pytest.fixture(scope="session")
def gloo_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of ``tests/train/_gloo_runs.py``'s runs, launched once per test session by
    torchrun with 2 CPU processes on gloo: ``digits/``, ``cma/`` and ``npos/``."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun is installed with torch"
    out = tmp_path_factory.mktemp("gloo")
    subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m",
                    "tests.train._gloo_runs", str(out)],
                   cwd=REPO, env=subprocess_env(), check=True, timeout=900)
    return out
