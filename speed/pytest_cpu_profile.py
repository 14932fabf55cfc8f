"""A pytest plugin that records each test's CPU time, to find where the suite's CPU goes.

    PYTHONPATH=speed .venv/bin/python -m pytest -q -n 3 --dist loadgroup -p pytest_cpu_profile
    .venv/bin/python speed/pytest_cpu_profile.py            # the table, from the files written

Each test's user + system CPU seconds (setup, call and teardown: a session fixture's cost lands on
the first test that asks for it) of the worker process and of the child processes it waited for
(``RUSAGE_CHILDREN``: the subprocesses a test starts and waits on), and its wall seconds, are
appended as JSON lines to ``$CPU_PROFILE_DIR/<worker>.jsonl`` (default
``.pytest-cpu-profile/``). Run as a script, it prints the CPU seconds per test file and the
slowest tests, and writes ``speed/results/suite_cpu_profile.json``.

Wall time under pytest-xdist depends on what the other workers do; CPU time far less, which is
why the suite's budget (2 cores x 6 minutes) is planned in CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = Path(__file__).resolve().parent / "results" / "suite_cpu_profile.json"


def _folder() -> Path:
    return Path(os.environ.get("CPU_PROFILE_DIR", ".pytest-cpu-profile"))


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    cpu, wall = _cpu_s(), time.perf_counter()
    yield
    record = {"test": item.nodeid, "cpu_s": round(_cpu_s() - cpu, 3),
              "wall_s": round(time.perf_counter() - wall, 3),
              "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{record['worker']}.jsonl").open("a") as out:
        out.write(json.dumps(record) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=_folder())
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    rows = [json.loads(line) for f in sorted(args.dir.glob("*.jsonl"))
            for line in f.read_text().splitlines() if line]
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        entry = per_file[row["test"].split("::")[0]]
        entry[0] += row["cpu_s"]
        entry[1] += row["wall_s"]
        entry[2] += 1
    total = sum(r["cpu_s"] for r in rows)
    print(f"{len(rows)} tests, {total:.1f} CPU-s in the workers and their waited-for children")
    print(f"\n{'CPU-s':>8} {'wall-s':>8} {'tests':>6}  file")
    for name, (cpu, wall, n) in sorted(per_file.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{cpu:8.1f} {wall:8.1f} {n:6d}  {name}")
    print(f"\n{'CPU-s':>8} {'wall-s':>8}  test")
    slowest = sorted(rows, key=lambda r: -r["cpu_s"])[:args.top]
    for row in slowest:
        print(f"{row['cpu_s']:8.1f} {row['wall_s']:8.1f}  {row['test']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"tests": len(rows), "cpu_s": round(total, 1),
                               "per_file": {k: {"cpu_s": round(v[0], 2), "wall_s": round(v[1], 2),
                                                "tests": v[2]} for k, v in per_file.items()},
                               "slowest": slowest}, indent=1) + "\n")


if __name__ == "__main__":
    main()
