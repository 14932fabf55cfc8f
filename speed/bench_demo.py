"""Wall time of ``oodbench demo`` (budget: under 2 minutes on a 2-core machine).

Runs the demo in a fresh subprocess with an empty activation cache (so the time includes the
imports, training, every forward pass, every detector and the report), once or ``--repeats``
times, and prints a table of the wall times with the machine's load average; writes
``speed/results/bench_demo.json``.

    python speed/bench_demo.py [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"
BUDGET_S = 120.0


def run_once() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OODBENCH_CACHE": str(Path(tmp) / "cache")}
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "oodbench.cli.main", "demo", "--out", str(Path(tmp) / "demo"),
             "--no-progress"], check=True, env=env, capture_output=True, text=True,
        )
        wall = time.perf_counter() - start
    return {"wall_s": wall, "load_before": load_before, "load_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    runs = [run_once() for _ in range(args.repeats)]
    table = Table(title=f"oodbench demo wall time (budget {BUDGET_S:.0f} s), {os.cpu_count()} CPUs")
    for column in ("run", "wall s", "load avg before", "load avg after", "within budget"):
        table.add_column(column, justify="right")
    for i, run in enumerate(runs, 1):
        table.add_row(str(i), f"{run['wall_s']:.1f}", f"{run['load_before']:.1f}",
                      f"{run['load_after']:.1f}", "yes" if run["wall_s"] < BUDGET_S else "NO")
    Console().print(table)
    RESULTS.mkdir(exist_ok=True)
    record = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "budget_s": BUDGET_S,
        "runs": runs,
    }
    (RESULTS / "bench_demo.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
