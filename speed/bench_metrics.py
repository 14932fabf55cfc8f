"""Speed of oodbench.metrics against scikit-learn and pure-Python pair counting.

Prints a table and writes the figures as JSON (``speed/results/bench_metrics.json``, or
``bench_metrics_quick.json`` with ``--quick``). Every row also records the largest absolute
difference between the two results, so a fast wrong answer shows.

    python speed/bench_metrics.py            # n = 1e4, 1e6, 1e7; pair counting on 2e4
    python speed/bench_metrics.py --quick    # n = 1e3, 1e4, 1e5; pair counting on 2e3

Scores: half ID ~ N(1, 1), half OOD ~ N(0, 1), float64, seed 0. Times are the best of a few
repeats (one at n = 1e7), wall clock, on whatever machine runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import sklearn
import torch
from rich.console import Console
from rich.table import Table
from sklearn import metrics as skm

from oodbench.metrics import auroc, evaluate, fpr_at_tpr

RESULTS = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


def best_time(func: Callable[[], T], repeats: int) -> tuple[float, T]:
    """(fastest wall time in seconds, the value of the last call)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = func()
        times.append(time.perf_counter() - start)
    return min(times), value


def row(metric: str, n: int, ours: tuple, reference: str, theirs: tuple, diff: float) -> dict:
    return {
        "metric": metric,
        "n": n,
        "oodbench_s": ours[0],
        "reference": reference,
        "reference_s": theirs[0],
        "speedup": theirs[0] / ours[0],
        "max_abs_diff": diff,
    }


def sklearn_fpr_at_tpr(y: np.ndarray, s: np.ndarray, tpr: float = 0.95) -> float:
    fpr, tpr_curve, _ = skm.roc_curve(y, s, drop_intermediate=False)
    return float(fpr[np.argmax(tpr_curve >= tpr)])


def sklearn_evaluate(y: np.ndarray, s: np.ndarray) -> list[float]:
    """The seven OOD metrics of :func:`oodbench.metrics.evaluate` with scikit-learn calls."""
    p_in, r_in, _ = skm.precision_recall_curve(y, s)
    p_out, r_out, _ = skm.precision_recall_curve(1 - y, -s)
    return [
        skm.roc_auc_score(y, s),
        sklearn_fpr_at_tpr(y, s),
        sklearn_fpr_at_tpr(1 - y, -s),
        skm.auc(r_in, p_in),
        skm.auc(r_out, p_out),
        skm.average_precision_score(y, s),
        skm.average_precision_score(1 - y, -s),
    ]


def sorted_loop_auroc(id_scores: list[float], ood_scores: list[float]) -> float:
    """The C-OOD code's algorithm in pure Python: sort by confidence, then walk the samples in a
    loop and count the (ID, OOD) pairs in the right order. Ties are broken by the sort order."""
    ranked = sorted([(s, True) for s in id_scores] + [(s, False) for s in ood_scores], reverse=True)
    id_seen = concordant = 0
    for _, is_id in ranked:
        if is_id:
            id_seen += 1
        else:
            concordant += id_seen
    return concordant / (len(id_scores) * len(ood_scores))


def tensor_loop_auroc(id_scores: list[float], ood_scores: list[float]) -> float:
    """The same count as the C-OOD code runs it (``gamma_correlation`` in
    mdabbah/COOD_benchmarking utils/uncertainty_metrics.py): ``torch.argsort`` of an (N, 2)
    tensor of (confidence, is_id), then Python loops that read one tensor element per step."""
    pairs = torch.tensor(
        [(s, 1.0) for s in id_scores] + [(s, 0.0) for s in ood_scores], dtype=torch.float64
    )
    pairs = pairs[torch.argsort(pairs[:, 0], descending=True)]
    id_seen = concordant = 0
    for i in range(pairs.shape[0]):
        if int(pairs[i][1]):
            id_seen += 1
        else:
            concordant += id_seen
    return concordant / (len(id_scores) * len(ood_scores))


def all_pairs_auroc(id_scores: list[float], ood_scores: list[float]) -> float:
    """Mann-Whitney by comparing every (ID, OOD) pair in pure Python: O(n_id * n_ood)."""
    wins = 0.0
    for a in id_scores:
        for b in ood_scores:
            wins += 1.0 if a > b else 0.5 if a == b else 0.0
    return wins / (len(id_scores) * len(ood_scores))


def scores(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(1, 1, n // 2), rng.normal(0, 1, n - n // 2)


def bench_size(n: int) -> list[dict]:
    """auroc, fpr_at_tpr and evaluate against scikit-learn on n scores."""
    id_scores, ood_scores = scores(n)
    y = np.r_[np.ones(id_scores.size, dtype=int), np.zeros(ood_scores.size, dtype=int)]
    s = np.r_[id_scores, ood_scores]
    repeats = 5 if n <= 10**5 else 3 if n <= 10**6 else 1
    print(f"n = {n:.0e} ...", file=sys.stderr, flush=True)
    rows = []

    ours = best_time(lambda: auroc(id_scores, ood_scores), repeats)
    theirs = best_time(lambda: skm.roc_auc_score(y, s), repeats)
    rows.append(row("auroc", n, ours, "sklearn roc_auc_score", theirs, abs(ours[1] - theirs[1])))

    ours = best_time(lambda: fpr_at_tpr(id_scores, ood_scores), repeats)
    theirs = best_time(lambda: sklearn_fpr_at_tpr(y, s), repeats)
    rows.append(row("fpr_at_tpr", n, ours, "sklearn roc_curve", theirs, abs(ours[1] - theirs[1])))

    all_ours = best_time(lambda: list(evaluate(id_scores, ood_scores).values()), repeats)
    all_theirs = best_time(lambda: sklearn_evaluate(y, s), repeats)
    diff = float(np.max(np.abs(np.subtract(all_ours[1], all_theirs[1]))))
    rows.append(row("evaluate (7 metrics)", n, all_ours, "sklearn, 7 calls", all_theirs, diff))
    return rows


def bench_pair_counting(n: int) -> list[dict]:
    """auroc against pure-Python pair counting on n scores."""
    id_scores, ood_scores = scores(n)
    id_list, ood_list = id_scores.tolist(), ood_scores.tolist()
    print(f"pair counting, n = {n:.0e} ...", file=sys.stderr, flush=True)
    ours = best_time(lambda: auroc(id_scores, ood_scores), 5)
    references: list[tuple[str, Callable[[list[float], list[float]], float], int]] = [
        ("sorted loop, Python lists", sorted_loop_auroc, 3),
        ("sorted loop over a tensor (C-OOD code)", tensor_loop_auroc, 1),
        ("Python all pairs", all_pairs_auroc, 1),
    ]
    rows = []
    for name, func, repeats in references:
        theirs = best_time(partial(func, id_list, ood_list), repeats)
        rows.append(row("auroc", n, ours, name, theirs, abs(ours[1] - theirs[1])))
    return rows


def show(rows: list[dict]) -> None:
    table = Table(title="oodbench.metrics vs references (wall seconds, best of repeats)")
    for column in ("metric", "n", "oodbench", "reference", "reference s", "speed-up", "|diff|"):
        table.add_column(column, justify="left" if column in ("metric", "reference") else "right")
    for r in rows:
        table.add_row(
            r["metric"],
            f"{r['n']:.0e}",
            f"{r['oodbench_s']:.4f}",
            r["reference"],
            f"{r['reference_s']:.4f}",
            f"{r['speedup']:.1f}x",
            f"{r['max_abs_diff']:.1e}",
        )
    Console(width=max(Console().width, 130)).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    quick = args.quick
    sizes = [10**3, 10**4, 10**5] if quick else [10**4, 10**6, 10**7]
    rows = [r for n in sizes for r in bench_size(n)]
    rows += bench_pair_counting(2 * 10**3 if quick else 2 * 10**4)
    show(rows)
    out = args.out or RESULTS / f"bench_metrics{'_quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sklearn": sklearn.__version__,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
