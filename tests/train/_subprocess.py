"""Training runs in subprocesses for the kill / torchrun tests: the environment that finds
oodbench and the tests, and a SIGKILL once the first checkpoint exists."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    return env


def kill_after_first_checkpoint(args: list[str], out: Path, pause: float, timeout: float) -> int:
    """Run ``python -m <args>``, SIGKILL it ``pause`` s after ``out/train.json`` appears;
    returns the epochs the checkpoint records."""
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=subprocess_env())
    deadline = time.monotonic() + timeout
    while not (out / "train.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(pause)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return int(json.loads((out / "train.json").read_text())["epochs_done"])
