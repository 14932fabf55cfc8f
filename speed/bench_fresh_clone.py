"""Wall time of the README's two set-up steps on fresh clones: ``make .venv/.oodbench-dev`` (the
virtual environment and the editable install with the dev extras) and then ``make test`` (ruff,
mypy, the whole suite with one pytest-xdist worker per core), each clone from scratch.

Clones go next to the repository (``../bench-clone-N``), so that the tests that read the
project's reference data at ``../shared/data`` find it as in a checkout. Each ``make test``
runs with ``--durations=15`` added (``PYTEST_ADDOPTS``), so the JSON also names the slowest
tests of each run. The load average before and after each clone is recorded: a busy machine
makes every figure larger, so quote only runs with a low load. The CPU time of ``make test`` (user +
system, of every process it started) is recorded beside its wall time: their ratio over the
number of cores says how much of the machine the suite kept busy (waits in tests, the last
worker's tail).

    python speed/bench_fresh_clone.py            # 3 clones of HEAD, one after another
    python speed/bench_fresh_clone.py --clones 1 --keep
    python speed/bench_fresh_clone.py --clones 1 --workers 3   # TEST_WORKERS=3 make test

Prints a table; adds its runs to ``speed/results/bench_fresh_clone.json`` (``--fresh``: replaces
the runs there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "bench_fresh_clone.json"


def children_cpu_s() -> float:
    """User + system CPU seconds of every finished child process of this one, so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """Run ``cmd`` with its output in ``log``; (wall seconds, CPU seconds of it and every process
    it started, exit status)."""
    start, cpu_start = time.perf_counter(), children_cpu_s()
    with log.open("w") as out:
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    return time.perf_counter() - start, children_cpu_s() - cpu_start, done.returncode


def summary_line(log: Path) -> str:
    """pytest's last line (``N passed, ... in S s``)."""
    lines = [x for x in log.read_text(errors="replace").splitlines()
             if re.search(r"\d+ (passed|failed)", x)]
    return lines[-1].strip("= ") if lines else "(no pytest summary)"


def slowest(log: Path) -> list[str]:
    return [x.strip() for x in log.read_text(errors="replace").splitlines()
            if re.match(r"^\d+\.\d+s (call|setup|teardown) ", x)]


def one_clone(i: int, keep: bool, workers: int | None) -> dict[str, object]:
    folder = REPO.parent / f"bench-clone-{i}"
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(folder)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, check=True,
                            capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTEST_ADDOPTS"] = "--durations=15"
    if workers is not None:
        env["TEST_WORKERS"] = str(workers)
    load_before = os.getloadavg()
    setup_s, _, setup_rc = timed(["make", ".venv/.oodbench-dev"], folder, folder / "setup.log", env)
    test_s, test_cpu_s, test_rc = timed(["make", "test"], folder, folder / "test.log", env)
    cores = os.cpu_count() or 1
    row = {
        "clone": i, "commit": commit, "setup_s": setup_s, "setup_rc": setup_rc,
        "make_test_s": test_s, "make_test_rc": test_rc, "make_test_cpu_s": test_cpu_s,
        "busy_share": test_cpu_s / (test_s * cores),
        "test_workers": workers if workers is not None else f"nproc = {cores}",
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
    parser.add_argument("--workers", type=int, default=None,
                        help="TEST_WORKERS for make test (default: the Makefile's, one per core)")
    parser.add_argument("--fresh", action="store_true",
                        help="replace the runs in the JSON instead of adding to them")
    args = parser.parse_args()
    earlier = [] if args.fresh or not OUT.exists() else json.loads(OUT.read_text())["clones"]
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = []
    for i in range(1, args.clones + 1):
        rows.append({**one_clone(i, args.keep, args.workers), "date": date,
                     "run": len(earlier) + i})
        r = rows[-1]
        print(f"clone {i} ({r['commit']}): set-up {r['setup_s']:.0f} s (rc {r['setup_rc']}); "
              f"make test {r['make_test_s']:.0f} s = {r['make_test_s'] / 60:.1f} min "
              f"(rc {r['make_test_rc']}, CPU {r['make_test_cpu_s']:.0f} s, machine busy "
              f"{r['busy_share']:.0%}); {r['pytest']}; load before "
              f"{r['load_average_before'][0]:.2f}", flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({
        "date": date,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
        "clones": earlier + rows,
    }, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
