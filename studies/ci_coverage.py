"""Coverage and cost of oodbench's confidence intervals (DeLong for AUROC, Wald and logit
intervals; bootstrap for FPR@95 and AUPR-In).

Coverage: binormal scores, ID ~ N(d, 1) and OOD ~ N(0, 1), whose true values are known in
closed form: AUROC = Phi(d / sqrt(2)); FPR@95 (ID positive) = 1 - Phi(d + Phi^-1(0.05));
AUPR-In = the integral of precision over recall at the simulated class ratio (numerically, on
200,001 thresholds). Each simulation draws fresh samples (seeded) and checks whether the 95 %
interval holds the true value.

Cost: wall time of the interval of one results row (one ID set against one OOD group) at the
C-OOD paper's size (50,000 ID against 50,000 OOD images per level) and smaller.

    python studies/ci_coverage.py            # 1,000 DeLong simulations per setting
    python studies/ci_coverage.py --quick    # 100, for a smoke run

Prints tables and writes ``studies/results/ci_coverage.json`` (``ci_coverage_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.stats import norm

from oodbench.metrics import evaluate
from oodbench.metrics.bootstrap import bootstrap_ci
from oodbench.metrics.delong import INTERVAL_METHODS as METHODS
from oodbench.metrics.delong import auroc_ci

RESULTS = Path(__file__).resolve().parent / "results"
AUROCS = (0.75, 0.90, 0.99)
SIZES = ((50, 50), (200, 200), (1000, 1000))


def shift_for(auroc: float) -> float:
    """The ID mean d that gives a binormal (unit variances) AUROC of ``auroc``."""
    return float(np.sqrt(2) * norm.ppf(auroc))


def true_fpr95(d: float) -> float:
    return float(norm.sf(d + norm.ppf(0.05)))


def true_aupr_in(d: float, ratio: float) -> float:
    """Area under precision(recall) with ID positive, ``ratio`` = n_id / (n_id + n_ood)."""
    t = np.linspace(d + 8, -8, 200_001)
    tpr, fpr = norm.sf(t - d), norm.sf(t)
    precision = np.where(tpr + fpr > 0, ratio * tpr / np.maximum(ratio * tpr + (1 - ratio) * fpr,
                                                                 1e-300), 1.0)
    return float(np.trapezoid(precision, tpr))


def delong_coverage(n_sims: int) -> list[dict]:
    """Both interval methods on the same simulated samples."""
    rows = []
    for auroc in AUROCS:
        d = shift_for(auroc)
        for m, n in SIZES:
            rng = np.random.default_rng([m, n, int(auroc * 1000)])
            hits, widths = {k: 0 for k in METHODS}, {k: [] for k in METHODS}
            for _ in range(n_sims):
                x, y = rng.normal(d, 1, m), rng.normal(0, 1, n)
                for method in METHODS:
                    iv = auroc_ci(x, y, method=method)
                    hits[method] += iv.low <= auroc <= iv.high
                    widths[method].append(iv.high - iv.low)
            for method in METHODS:
                cover = hits[method] / n_sims
                rows.append({"metric": "auroc", "method": f"delong {method}", "true_value": auroc,
                             "n_id": m, "n_ood": n, "simulations": n_sims, "coverage": cover,
                             "coverage_se": float(np.sqrt(cover * (1 - cover) / n_sims)),
                             "mean_width": float(np.mean(widths[method]))})
    return rows


def bootstrap_coverage(n_sims: int, n_boot: int) -> list[dict]:
    rows = []
    auroc, (m, n) = 0.90, (200, 200)
    d = shift_for(auroc)
    truth = {"fpr95_id": true_fpr95(d), "aupr_in": true_aupr_in(d, m / (m + n))}
    rng = np.random.default_rng(11)
    hits = dict.fromkeys(truth, 0)
    widths: dict[str, list[float]] = {k: [] for k in truth}
    for sim in range(n_sims):
        ivs = bootstrap_ci(rng.normal(d, 1, m), rng.normal(0, 1, n), list(truth), n_boot=n_boot,
                           seed=sim)
        for k, iv in ivs.items():
            hits[k] += iv.low <= truth[k] <= iv.high
            widths[k].append(iv.high - iv.low)
    for k, value in truth.items():
        cover = hits[k] / n_sims
        rows.append({"metric": k, "method": f"bootstrap percentile ({n_boot} replicates)",
                     "true_value": value, "n_id": m, "n_ood": n, "simulations": n_sims,
                     "coverage": cover, "coverage_se": float(np.sqrt(cover * (1 - cover) / n_sims)),
                     "mean_width": float(np.mean(widths[k]))})
    return rows


def timed(func, repeats: int = 3) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return float(best)


def cost(quick: bool) -> list[dict]:
    rows = []
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 50_000)
    for size in sizes:
        rng = np.random.default_rng(size)
        x, y = rng.normal(1.5, 1, size), rng.normal(0, 1, size)
        plain = timed(partial(evaluate, x, y))
        with_delong = timed(partial(evaluate, x, y, ci=True))
        rows.append({"what": "evaluate() without intervals", "n_id": size, "n_ood": size,
                     "seconds": plain})
        rows.append({"what": "evaluate(ci=True): + DeLong AUROC interval", "n_id": size,
                     "n_ood": size, "seconds": with_delong})
        for n_boot in (200, 1000):
            if size == 50_000 and n_boot == 1000 and quick:
                continue
            seconds = timed(partial(evaluate, x, y, ci=True, n_bootstrap=n_boot), repeats=1)
            rows.append({"what": f"evaluate(ci=True, n_bootstrap={n_boot}): + FPR@95/AUPR",
                         "n_id": size, "n_ood": size, "seconds": seconds})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    console = Console(width=140)
    started = time.perf_counter()
    coverage = delong_coverage(100 if args.quick else 1000)
    coverage += bootstrap_coverage(50 if args.quick else 500, 200 if args.quick else 500)
    table = Table(title="Coverage of 95 % intervals (binormal, true value known)")
    for col in ("metric", "method", "true value", "n_id", "n_ood", "sims", "coverage", "± se",
                "mean width"):
        table.add_column(col, justify="left" if col in ("metric", "method") else "right")
    for r in coverage:
        table.add_row(r["metric"], r["method"], f"{r['true_value']:.4f}", str(r["n_id"]),
                      str(r["n_ood"]), str(r["simulations"]), f"{r['coverage']:.3f}",
                      f"{r['coverage_se']:.3f}", f"{r['mean_width']:.4f}")
    console.print(table)
    costs = cost(args.quick)
    table = Table(title="Cost of the intervals of one results row (best of 3; bootstrap once)")
    for col in ("what", "n_id", "n_ood", "seconds"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for r in costs:
        table.add_row(r["what"], f"{r['n_id']:,}", f"{r['n_ood']:,}", f"{r['seconds']:.4f}")
    console.print(table)
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "total_seconds": time.perf_counter() - started,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("ci_coverage_quick.json" if args.quick else "ci_coverage.json")
    out.write_text(json.dumps({"meta": meta, "coverage": coverage, "cost": costs}, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
