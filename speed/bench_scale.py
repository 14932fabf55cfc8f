"""Scale: the heavy detectors on the NumPy path against the torch path, at 50,000 x 2,048, and
one extraction spread over 1 and 2 Ray workers.

``detectors``: every detector with a torch path (``oodbench.compute``) fitted on ``--bank``
training rows and scoring ``--rows`` rows of 2,048 features and 1,000 logits (the synthetic,
ResNet-50-shaped arrays of ``bench_detectors.py``), once with ``compute.use("numpy")`` and once
with ``compute.use("torch", --device)`` (the CPU by default: on this machine there is no GPU),
with the largest relative difference of the two paths' scores.

``extraction``: one extraction (``--model``, random weights, over a temporary folder of
``--images`` random 256 px JPEGs, decoded and preprocessed by the model's transform) as Ray
shard tasks (``extract(..., executor=RayShards(num_cpus=1))``) on a local Ray instance with 1
and then 2 CPUs, so 1 and 2 workers of one torch thread each; and the same extraction in this
process with 1 torch thread, the reference the Ray arrays must equal bit for bit. Each Ray
instance first runs a small warm-up extraction (worker processes started, torch imported); the
time is that of the ``extract`` call alone, the best of ``--repeat`` runs of each, alternating. The speed-up of 2 workers over 1 is bounded by the
machine's cores (2 here) and by whatever else runs on them: the load average is recorded.

Prints a table and writes its part (``detectors`` or ``extraction``) of
``speed/results/bench_scale.json`` (other parts are kept); ``detectors`` after every
detector (``"complete": false`` until the last).

    python speed/bench_scale.py detectors                      # 50,000 scored, 50,000 bank
    python speed/bench_scale.py detectors --rows 5000 --bank 5000 --only knn,vim
    python speed/bench_scale.py extraction                     # resnet18, 384 images
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench_detectors import make_acts, make_head
from bench_extract import make_folder
from oodbench import compute
from oodbench.detectors import create
from oodbench.extract import RayShards, extract
from oodbench.models import load

RESULTS = Path(__file__).resolve().parent / "results" / "bench_scale.json"
#: the detectors with a torch path on the device
TORCH_PATH = ["knn", "nnguide", "mahalanobis", "rmd", "vim", "line", "dice", "react", "ash_p",
              "ash_b", "ash_s", "scale", "vra", "gen", "energy", "msp"]


def run(name: str, train, test, kind: str, device: str) -> tuple[float, float, np.ndarray]:
    """(fit seconds, score seconds, scores) of ``name`` on one path."""
    with compute.use(kind, device if kind == "torch" else None):
        det = create(name)
        start = time.perf_counter()
        det.fit(train)
        fitted = time.perf_counter()
        scores = det.score(test)
        if kind == "torch" and torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        return fitted - start, time.perf_counter() - fitted, scores


def save(part: str, result: dict) -> None:
    """Write ``result`` as ``part`` of the results file (other parts kept)."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[part] = {**result, "machine": {"platform": platform.platform(),
                                           "cpus": os.cpu_count(), "torch": torch.__version__}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


def detectors(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    head = make_head(args.classes, args.dim, rng)
    train, test = make_acts(args.bank, head, rng), make_acts(args.rows, head, rng)
    print(f"arrays in {time.perf_counter() - start:.1f} s: bank {args.bank:,}, scored {args.rows:,}, "
          f"{args.dim} features, {args.classes} classes; torch path on {args.device}, "
          f"{torch.get_num_threads()} threads", flush=True)
    wanted = [n for n in args.only.split(",") if n] or TORCH_PATH
    rows: list[dict] = []
    setup = {"bank": args.bank, "rows": args.rows, "dim": args.dim, "classes": args.classes,
             "device": args.device, "torch_threads": torch.get_num_threads()}
    print(f"{'detector':<14}{'numpy fit':>11}{'score':>9}{'torch fit':>11}{'score':>9}"
          f"{'torch/numpy':>13}{'max rel diff':>14}", flush=True)
    for name in wanted:
        n_fit, n_score, reference = run(name, train, test, "numpy", args.device)
        t_fit, t_score, scores = run(name, train, test, "torch", args.device)
        scale = max(float(np.abs(reference).max()), 1e-300)
        row = {"detector": name, "numpy_fit_s": n_fit, "numpy_score_s": n_score,
               "torch_fit_s": t_fit, "torch_score_s": t_score,
               "torch_over_numpy": (t_fit + t_score) / (n_fit + n_score),
               "max_abs_diff_over_max_abs": float(np.abs(scores - reference).max()) / scale}
        rows.append(row)
        print(f"{name:<14}{n_fit:>11.2f}{n_score:>9.2f}{t_fit:>11.2f}{t_score:>9.2f}"
              f"{row['torch_over_numpy']:>13.2f}{row['max_abs_diff_over_max_abs']:>14.1e}", flush=True)
        save("detectors", {**setup, "complete": False, "detectors": rows})  # kept if stopped
    total_numpy = sum(r["numpy_fit_s"] + r["numpy_score_s"] for r in rows)
    total_torch = sum(r["torch_fit_s"] + r["torch_score_s"] for r in rows)
    print(f"{'total':<14}{total_numpy:>20.1f}{total_torch:>20.1f}{total_torch / total_numpy:>13.2f}")
    return {**setup, "complete": True, "total_numpy_s": total_numpy, "total_torch_s": total_torch,
            "detectors": rows}


def ray_extraction(model, source, warm, workers: int, cache: Path, options: dict) -> tuple:
    """(seconds, activations, record) of one extraction on a fresh local Ray instance with
    ``workers`` CPUs, after a warm-up extraction of ``warm``."""
    import ray

    os.environ["OODBENCH_CACHE"] = str(cache)  # the Ray workers inherit it
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 2**20)
    try:
        ray_options = {**options, "executor": RayShards(num_cpus=1)}
        extract(model, warm, **{**ray_options, "shard_size": options["batch_size"]})
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        acts = extract(model, source, **ray_options)
        seconds = time.perf_counter() - start
    finally:
        ray.shutdown()
    record = {"workers": workers, "seconds": seconds,
              "shard_tasks": acts.meta["timings"]["shard_tasks"],
              "tasks_forward_s_summed": acts.meta["timings"]["forward_s"],
              "load_average_1min_before": load_before,
              "load_average_1min_after": os.getloadavg()[0]}
    return seconds, acts, record


def extraction(args: argparse.Namespace) -> dict:
    torch.set_num_threads(1)  # a Ray task with num_cpus=1 runs one torch thread
    model = load(args.model, pretrained=False)
    options = {"batch_size": args.batch_size, "shard_size": args.shard_size, "device": "cpu",
               "progress": False}
    fields = ("logits", "features", "labels", "ids", "source_indices")
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        source = make_folder(Path(tmp) / "images", args.images)
        warm = make_folder(Path(tmp) / "warm", 2 * args.batch_size)
        os.environ["OODBENCH_CACHE"] = str(Path(tmp) / "local")
        start = time.perf_counter()
        reference = extract(model, source, **options)
        local_s = time.perf_counter() - start
        for repeat in range(args.repeat):  # alternate 1 and 2 workers: both see the same load
            for workers in (1, 2):
                cache = Path(tmp) / f"ray{workers}-{repeat}"
                _, acts, record = ray_extraction(model, source, warm, workers, cache, options)
                record["bit_identical"] = all(np.array_equal(getattr(acts, f), getattr(reference, f))
                                              for f in fields)
                runs.append(record)
                print(f"  {workers} worker(s): {record['seconds']:.1f} s (load "
                      f"{record['load_average_1min_before']:.1f}), bit-identical "
                      f"{record['bit_identical']}", flush=True)
    best = {w: min(r["seconds"] for r in runs if r["workers"] == w) for w in (1, 2)}
    print(f"{args.model}, {args.images} images, batch {args.batch_size}, shards of "
          f"{args.shard_size}; {os.cpu_count()} CPUs; best of {args.repeat}")
    print(f"{'executor':<30}{'seconds':>9}{'images/s':>10}")
    print(f"{'local, 1 torch thread':<30}{local_s:>9.1f}{args.images / local_s:>10.1f}")
    for w in (1, 2):
        print(f"{f'ray, {w} worker(s) x 1 CPU':<30}{best[w]:>9.1f}{args.images / best[w]:>10.1f}")
    speedup = best[1] / best[2]
    identical = all(r["bit_identical"] for r in runs)
    print(f"2 workers over 1: x{speedup:.2f} (best times; at most x2 on this machine's 2 cores, "
          f"less when other work shares them); every Ray run bit-identical to local: {identical}")
    return {"model": args.model, "images": args.images, "batch_size": args.batch_size,
            "shard_size": args.shard_size, "repeat": args.repeat, "local_1_thread_s": local_s,
            "best_s": {f"{w}_workers": best[w] for w in (1, 2)},
            "speedup_2_over_1_workers": speedup, "all_bit_identical": identical, "runs": runs,
            "caveat": "2 CPU cores bound the speed-up at x2, and this machine is shared with "
                      "other work (1-minute load averages per run): best of the alternating "
                      "runs"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    det = sub.add_parser("detectors", help="NumPy path against torch path")
    det.add_argument("--rows", type=int, default=50_000)
    det.add_argument("--bank", type=int, default=50_000)
    det.add_argument("--dim", type=int, default=2048)
    det.add_argument("--classes", type=int, default=1000)
    det.add_argument("--device", default="cpu")
    det.add_argument("--only", default="")
    ext = sub.add_parser("extraction", help="one extraction on 1 and 2 Ray workers")
    ext.add_argument("--model", default="timm:resnet18")
    ext.add_argument("--images", type=int, default=384)
    ext.add_argument("--batch-size", type=int, default=16)
    ext.add_argument("--shard-size", type=int, default=32)
    ext.add_argument("--repeat", type=int, default=3, help="alternating runs of 1 and 2 workers")
    args = parser.parse_args()

    save(args.part, {"detectors": detectors, "extraction": extraction}[args.part](args))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
