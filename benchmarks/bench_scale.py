"""Scale: the heavy detectors on the NumPy path against the torch path, at 50,000 x 2,048.

``detectors``: every detector with a torch path (``oodbench.compute``) fitted on ``--bank``
training rows and scoring ``--rows`` rows of 2,048 features and 1,000 logits (the synthetic,
ResNet-50-shaped arrays of ``bench_detectors.py``), once with ``compute.use("numpy")`` and once
with ``compute.use("torch", --device)`` (the CPU by default: on this machine there is no GPU),
with the largest relative difference of the two paths' scores.

Prints a table and writes the ``detectors`` part of ``benchmarks/results/bench_scale.json``
(other parts are kept), after every detector (``"complete": false`` until the last).

    python benchmarks/bench_scale.py detectors                      # 50,000 scored, 50,000 bank
    python benchmarks/bench_scale.py detectors --rows 5000 --bank 5000 --only knn,vim
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from bench_detectors import make_acts, make_head
from oodbench import compute
from oodbench.detectors import create

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
    args = parser.parse_args()

    save(args.part, detectors(args))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
