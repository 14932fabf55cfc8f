"""Wall time of the README's two set-up steps on fresh clones: ``make .venv/.oodbench-dev`` (the
virtual environment and the editable install with the dev extras) and then ``make test`` (ruff,
mypy, the whole suite with one pytest-xdist worker per core), each clone from scratch.

Clones go next to the repository (``../bench-clone-N``), so that the tests that read the
project's reference data at ``../shared/data`` find it as in a checkout. Each ``make test``
runs with ``--durations=15`` added (``PYTEST_ADDOPTS``), so the JSON also names the slowest
tests of each run. The load average before and after each clone is recorded: a busy machine
makes every figure larger, so quote only runs with a low load.

    python speed/bench_fresh_clone.py            # 3 clones of HEAD, one after another
    python speed/bench_fresh_clone.py --clones 1 --keep

Prints a table; writes ``speed/results/bench_fresh_clone.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "bench_fresh_clone.json"


def timed(cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> tuple[float, int]:
    """Run ``cmd`` with its output in ``log``; (wall seconds, exit status)."""
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    return time.perf_counter() - start, done.returncode


def summary_line(log: Path) -> str:
    """pytest's last line (``N passed, ... in S s``)."""
    lines = [x for x in log.read_text(errors="replace").splitlines()
             if re.search(r"\d+ (passed|failed)", x)]
    return lines[-1].strip("= ") if lines else "(no pytest summary)"


def slowest(log: Path) -> list[str]:
    return [x.strip() for x in log.read_text(errors="replace").splitlines()
            if re.match(r"^\d+\.\d+s (call|setup|teardown) ", x)]


def one_clone(i: int, keep: bool) -> dict[str, object]:
    folder = REPO.parent / f"bench-clone-{i}"
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(folder)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, check=True,
                            capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTEST_ADDOPTS"] = "--durations=15"
    load_before = os.getloadavg()
    setup_s, setup_rc = timed(["make", ".venv/.oodbench-dev"], folder, folder / "setup.log", env)
    test_s, test_rc = timed(["make", "test"], folder, folder / "test.log", env)
    row = {
        "clone": i, "commit": commit, "setup_s": setup_s, "setup_rc": setup_rc,
        "make_test_s": test_s, "make_test_rc": test_rc,
        "pytest": summary_line(folder / "test.log"), "slowest": slowest(folder / "test.log"),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clones", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the clones and their logs")
    args = parser.parse_args()
    rows = []
    for i in range(1, args.clones + 1):
        rows.append(one_clone(i, args.keep))
        r = rows[-1]
        print(f"clone {i} ({r['commit']}): set-up {r['setup_s']:.0f} s (rc {r['setup_rc']}); "
              f"make test {r['make_test_s']:.0f} s = {r['make_test_s'] / 60:.1f} min "
              f"(rc {r['make_test_rc']}); {r['pytest']}; load before "
              f"{r['load_average_before'][0]:.2f}", flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
        "clones": rows,
    }, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
