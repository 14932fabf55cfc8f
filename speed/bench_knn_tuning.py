"""Cost of KNN's tuning trials, each redoing the neighbour search or reusing it (issue 36).

    .venv/bin/python speed/bench_knn_tuning.py            # both problems below, 30 trials
    .venv/bin/python speed/bench_knn_tuning.py --quick    # every row count / 10
    .venv/bin/python speed/bench_knn_tuning.py --problems study --trials 10

A trial of the CIFAR tuning study (``studies/tuning_study_cifar.py``) under its ``ood_val``
protocol fits a new KNN with the trial's k on the training features and scores ``id_val`` and
``ood_val`` (:func:`oodbench.tuning.protocols.ood_val.ood_val_objective`). Two problems, random
(post-ReLU, class-structured) float32 features from ``bench_detectors.make_acts``:

* ``study``: the study's sizes: a bank of the 30,000 training images of its 6 ID classes, 128
  features (ResNet-9 at width 16: 8 x 16), ``id_val`` 3,000 rows, ``ood_val`` 1,000;
* ``wide``: a 15,000 x 512 bank, ``id_val`` 3,000 x 512, ``ood_val`` 1,000 x 512.

First ``oodbench.tune("knn", {"k": Range(1, 500)}, ..., search="gp", n_trials=30, seed=0)``,
the study's search (App. A's K in [1, 500], Optuna's Gaussian process), runs as shipped (with
the reuse); its table gives the 30 ks. Then the same 30 trials (the protocol's own objective,
without the sampler) run twice: ``before``, each trial searching afresh (outside
``reuse_searches()``: what every trial did before), and ``after``, inside it. Both sides'
metrics are compared for equality (they must be the same bits). Prints a table and writes
``speed/results/bench_knn_tuning.json`` (``_quick`` with ``--quick``). Wall-clock seconds of one
run, with the thread counts and the load averages before and after in the JSON: this machine
is shared, so compare the two sides of one run, not one run with another.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch

from bench_detectors import make_acts, make_head
from oodbench.detectors import detector_class
from oodbench.detectors._search_memo import PREFETCH_DEPTH, reuse_searches
from oodbench.detectors._stats import LargeKWarning
from oodbench.tuning import Range, tune
from oodbench.tuning.protocol import TuningData
from oodbench.tuning.protocols.ood_val import ood_val_objective
from oodbench.tuning.space import detector_builder

RESULTS = Path(__file__).resolve().parent / "results"
#: name -> (bank rows, features, id_val rows, ood_val rows, ID classes)
PROBLEMS = {"study": (30_000, 128, 3_000, 1_000, 6), "wide": (15_000, 512, 3_000, 1_000, 6)}
SPACE = {"k": Range(1, 500)}


def problem_data(name: str, divide: int) -> TuningData:
    """Random training, id_val and ood_val activations of one problem (rows / ``divide``)."""
    bank, dim, n_id, n_ood, classes = PROBLEMS[name]
    rng = np.random.default_rng(0)
    head = make_head(classes, dim, rng)
    other = make_head(classes, dim, np.random.default_rng(1))  # OOD: another model's classes
    ood = make_acts(n_ood // divide, (other[0], head[1], head[2]), rng)
    return TuningData(make_acts(n_id // divide, head, rng), ood, make_acts(bank // divide, head, rng),
                      None)


def trials(data: TuningData, ks: list[int], reuse: bool) -> tuple[list[float], list[dict[str, float]]]:
    """Seconds and metrics of one trial per k, each searching afresh or (``reuse``) inside one
    ``reuse_searches()``."""
    objective = ood_val_objective(detector_builder("knn", ["k"]), data)
    seconds, rows = [], []
    with reuse_searches() if reuse else nullcontext():
        for k in ks:
            start = time.perf_counter()
            rows.append(objective({"k": k}))
            seconds.append(time.perf_counter() - start)
    return seconds, rows


def summary(seconds: list[float]) -> dict[str, float]:
    return {"total_s": sum(seconds), "first_s": seconds[0],
            "median_later_s": statistics.median(seconds[1:]) if len(seconds) > 1 else float("nan")}


def run_problem(name: str, divide: int, n_trials: int) -> dict[str, Any]:
    data = problem_data(name, divide)
    assert data.fit is not None and data.fit.features is not None
    print(f"{name}: bank {data.fit.features.shape}, id_val {len(data.id_val)}, "
          f"ood_val {len(data.ood_val or [])}", flush=True)
    start = time.perf_counter()
    result = tune("knn", SPACE, data.id_val, data.ood_val, fit=data.fit, search="gp",
                  n_trials=n_trials, seed=0)
    tune_s = time.perf_counter() - start
    ks = [int(k) for k in result.table["k"]]
    before_s, before = trials(data, ks, reuse=False)
    after_s, after = trials(data, ks, reuse=True)
    return {"problem": name, "bank": list(data.fit.features.shape), "id_val": len(data.id_val),
            "ood_val": len(data.ood_val or []), "ks": ks, "tune_gp_with_reuse_s": tune_s,
            "before": summary(before_s), "after": summary(after_s),
            "before_per_trial_s": before_s, "after_per_trial_s": after_s,
            "identical_metrics": before == after, "best_k": int(result.best_params["k"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="every row count / 10")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated: study,wide")
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    warnings.simplefilter("ignore", LargeKWarning)  # the paper's K up to 500 of small banks
    detector_class("knn")  # registry loaded before timing
    load_before = os.getloadavg()
    rows = [run_problem(name, 10 if args.quick else 1, args.trials)
            for name in args.problems.split(",")]
    out = {"rows": rows, "trials": args.trials, "quick": args.quick,
           "prefetch_depth": PREFETCH_DEPTH, "torch_threads": torch.get_num_threads(),
           "faiss_threads": faiss.omp_get_max_threads(), "cpus": os.cpu_count(),
           "load_average_before": load_before, "load_average_after": os.getloadavg(),
           "python": sys.version.split()[0], "machine": platform.machine(),
           "faiss": faiss.__version__, "torch": torch.__version__,
           "note": "wall-clock seconds of one run on a shared machine (other jobs running)"}
    print(f"\n{'problem':8} {'trials':>6} {'before s':>9} {'after s':>8} {'x':>6} "
          f"{'after 1st':>9} {'after med':>9} {'tune gp':>8} identical")
    for row in rows:
        b, a = row["before"], row["after"]
        print(f"{row['problem']:8} {len(row['ks']):6d} {b['total_s']:9.2f} {a['total_s']:8.2f} "
              f"{b['total_s'] / a['total_s']:6.1f} {a['first_s']:9.2f} {a['median_later_s']:9.3f} "
              f"{row['tune_gp_with_reuse_s']:8.2f} {row['identical_metrics']}")
    path = RESULTS / ("bench_knn_tuning_quick.json" if args.quick else "bench_knn_tuning.json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
