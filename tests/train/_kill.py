"""Start a training run in a subprocess and SIGKILL it once it has written a checkpoint."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path


def kill_after_first_checkpoint(command: list[str], out: Path, *, cwd: Path, env: dict[str, str],
                                wait: float = 120.0, delay: float = 0.2) -> int:
    """Run ``command``, SIGKILL it ``delay`` s after ``out/train.json`` appears; the epochs done."""
    proc = subprocess.Popen(command, cwd=cwd, env=env)
    deadline = time.monotonic() + wait
    while not (out / "train.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    return int(json.loads((out / "train.json").read_text())["epochs_done"])
