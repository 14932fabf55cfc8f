"""Why a busy machine slowed the chunked detectors, counted rather than timed: torch ops per
``score`` call and the parallel regions they may open, before and after the chunks went to
single-threaded workers (``oodbench.compute.Backend.run_chunks``), next to pytorch-ood.

Counts do not depend on the machine's load, so they are the evidence here; timings
(``--time``) are given beside them with the load average.

For each detector that runs from arrays, one ``score`` call is profiled (``torch.profiler``,
every thread) three ways:

* ``before``: the chunk loops in order in the calling thread with all its intra-op threads (the
  code before ``run_chunks``; re-created here by replacing ``run_chunks`` with that loop);
* ``after``: the code as it is;
* ``pytorch-ood``: its counterpart on the same arrays, in one call on all rows (logit
  detectors) or batches of 128 rows (``bench_detectors.py``'s convention).

``ops``: top-level torch ops of the call. ``parallel``: those that may open an OpenMP parallel
region: ATen splits an op over threads only when it covers more than ``GRAIN`` (32,768)
elements and its thread has more than one intra-op thread, so this counts the top-level ops, other
than views and metadata ops, with an input of more than ``GRAIN`` elements that ran on a thread
with more than one intra-op thread (an upper bound: an op may still run inline). Under
contention each such region waits for its slowest, possibly descheduled, thread.

``--time``: MSP, energy and max-logit on 20,000 x 1,000 float32 logits (the issue's case), best
of ``--repeat``, idle-as-possible and with ``--neighbours`` spinning processes, before / after /
pytorch-ood in one call.

Prints tables and writes ``speed/results/bench_parallel_regions.json``.

    python speed/bench_parallel_regions.py --quick          # 5,000 rows, counts only
    python speed/bench_parallel_regions.py --quick --time   # and the timings
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function

from bench_detectors import (
    FULL,
    POOD_ONE_CALL,
    POOD_SETTINGS,
    busy_neighbours,
    make_acts,
    make_head,
    ours,
    pytorch_ood,
)
from oodbench import compute
from oodbench.detectors import available
from oodbench.extract.activations import Activations
from oodbench.metrics import evaluate

RESULTS = Path(__file__).resolve().parent / "results" / "bench_parallel_regions.json"
#: at::internal::GRAIN_SIZE: ATen runs an op inline below this many elements
GRAIN = 32768
#: ops that only make views or change metadata (no parallel loop)
VIEWS = {"aten::detach", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg",
         "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::view",
         "aten::as_strided", "aten::alias", "aten::t", "aten::transpose", "aten::expand",
         "aten::numpy_T", "aten::reshape", "aten::_reshape_alias", "aten::flatten",
         "aten::permute", "aten::empty", "aten::empty_like", "aten::result_type",
         "aten::set_", "aten::item", "aten::_local_scalar_dense"}
MARK = "bench_parallel_regions.main_thread"
#: pytorch-ood counterparts not profiled: tens of seconds to minutes each at --quick size
#: (bench_detectors.py times them)
POOD_TOO_SLOW = {"dice", "gradnorm", "mahalanobis", "rmd"}


@contextmanager
def chunks_in_order():
    """``run_chunks`` as before it existed: every chunk in order, here, with this thread's
    intra-op threads."""
    original = compute.Backend.run_chunks

    def in_order(self: compute.Backend, slices: Iterable[slice], fn: Callable[[slice], None]) -> None:
        for rows in slices:
            fn(rows)

    compute.Backend.run_chunks = in_order  # type: ignore[method-assign]
    try:
        yield
    finally:
        compute.Backend.run_chunks = original  # type: ignore[method-assign]


def elements(shapes: list[Any]) -> int:
    """The largest number of elements among an op's tensor inputs."""
    sizes = [int(np.prod(s)) for s in shapes if isinstance(s, list) and s and all(
        isinstance(d, int) for d in s)]
    return max(sizes, default=0)


def count(score: Callable[[], Any]) -> dict[str, int]:
    """Top-level ops of ``score()`` and those that may open a parallel region (see the module
    docstring); ops off the calling thread ran on ``run_chunks``' workers (one intra-op thread
    each: checked in ``main``)."""
    config = _ExperimentalConfig(profile_all_threads=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 experimental_config=config) as prof:
        with record_function(MARK):
            torch.zeros(1)
        score()
    events = prof.events()
    main = {e.thread for e in events if e.name == MARK}
    top = [e for e in events if e.cpu_parent is None and e.name != MARK
           and not e.name.startswith("bench_parallel")]
    threads = torch.get_num_threads()
    parallel = [e for e in top if e.name not in VIEWS and elements(e.input_shapes) > GRAIN
                and (threads if e.thread in main else 1) > 1]
    return {"ops": len(top), "parallel": len(parallel),
            "ops_on_workers": sum(e.thread not in main for e in top)}


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def timings(repeat: int, neighbours: int) -> list[dict[str, Any]]:
    """MSP, energy, max-logit on 20,000 x 1,000 logits: before / after / pytorch-ood (one call),
    best of ``repeat``, without and with ``neighbours`` spinning processes."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((20_000, 1_000), dtype=np.float32) * 3
    n = len(logits)
    acts = Activations(logits=logits, labels=np.zeros(n, dtype=np.int64), ids=np.arange(n).astype(str),
                       features=np.zeros((n, 1), dtype=np.float32),  # pytorch_ood() builds a head
                       head_weight=np.zeros((1000, 1), dtype=np.float32),
                       head_bias=np.zeros(1000, dtype=np.float32))
    out = []
    for busy in (0, neighbours):
        with busy_neighbours(busy, seconds=1800):
            for name in ("msp", "energy", "maxlogit"):
                _, score = ours(name, acts, acts)
                _, theirs = pytorch_ood(name, acts, acts, None)
                expected = score()
                with chunks_in_order():
                    assert np.array_equal(score(), expected), name  # identical scores
                    before = best_of(score, repeat)
                after = best_of(score, repeat)
                pood = best_of(theirs, repeat)
                out.append({"detector": name, "neighbours": busy, "before_s": before,
                            "after_s": after, "pytorch_ood_one_call_s": pood,
                            "load_average_1min": os.getloadavg()[0]})
                print(f"{name:10s} neighbours {busy}: before {before * 1e3:7.1f} ms  after "
                      f"{after * 1e3:7.1f} ms  pytorch-ood {pood * 1e3:7.1f} ms  (load "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every row count / 10")
    parser.add_argument("--time", action="store_true", help="also the timings (see above)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--neighbours", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", default="", help="comma-separated detector names to count")
    args = parser.parse_args()
    load_before = os.getloadavg()
    sizes = dict(FULL)
    if args.quick:
        sizes.update({k: sizes[k] // 10 for k in ("n_test", "n_train", "n_map")})
    rng = np.random.default_rng(0)
    head = make_head(sizes["classes"], sizes["dim"], rng)
    train, test = make_acts(sizes["n_train"], head, rng), make_acts(sizes["n_test"], head, rng)
    maps = make_acts(sizes["n_map"], head, rng, map_hw=sizes["map_hw"])
    skip = {"model", "text_embeddings", "groups"}
    rows = []
    warnings.simplefilter("ignore")
    print("| detector | before: ops | parallel | after: ops | parallel | pytorch-ood: ops | parallel |")
    print("|---|---|---|---|---|---|---|")
    for info in available():
        name = info["name"]
        if skip & set(info["requires"]) or (args.only and name not in args.only.split(",")):
            continue
        scored = maps if "feature_map" in info["requires"] else test
        fit, score = ours(name, train, scored)
        fit()
        score()  # the workers are started and every lazy path taken before counting
        with chunks_in_order():
            before = count(score)
        row: dict[str, Any] = {"detector": name, "before": before, "after": count(score)}
        if name in POOD_SETTINGS and name not in POOD_TOO_SLOW:
            batch = None if name in POOD_ONE_CALL else 128
            pood_fit, pood_score = pytorch_ood(name, train, scored, batch)
            pood_fit()
            row["pytorch_ood"] = {"batch": batch or "all rows", **count(pood_score)}
        rows.append(row)
        theirs = row.get("pytorch_ood", {})
        print(f"| {name} | {before['ops']} | {before['parallel']} | {row['after']['ops']} | "
              f"{row['after']['parallel']} | {theirs.get('ops', '')} | {theirs.get('parallel', '')} |",
              flush=True)
    metric_scores = rng.standard_normal(2 * sizes["n_test"])
    metrics = count(lambda: evaluate(metric_scores[: sizes["n_test"]], metric_scores[sizes["n_test"]:]))
    print(f"| metrics (evaluate: AUROC, FPR@95, AUPR) | {metrics['ops']} | {metrics['parallel']} | "
          "(NumPy sorts on the CPU path: no torch op) | | | |")
    pool = compute._single_thread_workers(torch.get_num_threads())
    worker_threads = sorted(set(pool.map(lambda _: torch.get_num_threads(), range(16))))
    result = {"sizes": sizes, "grain": GRAIN, "rows": rows, "metrics_evaluate": metrics,
              "worker_intra_op_threads": worker_threads,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                          "load_average_1_5_15min_before": load_before}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")  # the counts, kept if timing stops
    if args.time:
        result["timings"] = timings(args.repeat, args.neighbours)
        result["timings_repeat"] = args.repeat
    result["machine"]["load_average_1_5_15min_after"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"workers' intra-op threads: {worker_threads}\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
