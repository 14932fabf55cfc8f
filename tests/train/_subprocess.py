"""Training runs in other processes for the kill / torchrun tests: the environment that finds
oodbench and the tests, and a SIGKILL once the first checkpoint exists."""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _run_module_in_child(args: list[str], log: Path) -> None:
    """In the forked child: ``python -m <args>`` (``runpy`` with ``sys.argv`` set), its output in
    ``log``; the child always leaves through ``os._exit``, never back into pytest."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = list(args)
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        code = 0
    except BaseException:  # noqa: BLE001 - reported in the log, the exit status says it
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def kill_after_first_checkpoint(args: list[str], out: Path, pause: float, timeout: float) -> int:
    """Run ``python -m <args>`` in a forked copy of this process, SIGKILL it ``pause`` s after
    ``out/train.json`` appears; returns the epochs the checkpoint records.

    A fork, not a new interpreter: the child starts with torch and oodbench already imported
    (a new ``python -m`` spent about 2.5 CPU-s importing them before its first step). It is a
    separate process all the same, killed by the signal with its checkpoint half way: what the
    resume is tested against. The tests' workers compute with one thread (tests/conftest.py),
    so no thread pool is forked busy. Its output is in ``out``'s sibling ``killed-child.log``.
    """
    log = out.parent / "killed-child.log"
    pid = os.fork()
    if pid == 0:
        _run_module_in_child(args, log)
    deadline = time.monotonic() + timeout
    status = None  # set when the child ended by itself (before the kill)
    while not (out / "train.json").exists() and time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
            break
        time.sleep(0.005)
    if status is None:
        time.sleep(pause)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the child was not killed mid-run (status {status}); its output:\n"
        f"{log.read_text() if log.exists() else '(none)'}")
    return int(json.loads((out / "train.json").read_text())["epochs_done"])
