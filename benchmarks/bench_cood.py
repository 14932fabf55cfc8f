"""Time the C-OOD level construction at the paper's scale and beyond.

Per-class mean kappa (``per_class_mean``: ``np.unique`` + ``np.bincount``) and the severity
windows (``severity_windows``: stable sort + cumulative sum) for N classes x M images, with
non-contiguous class labels; the paper's setting is ~10,000 ImageNet-21k classes x 150
estimation images, window 1000, 11 levels. Prints a table and writes
``benchmarks/results/bench_cood.json``.

    python benchmarks/bench_cood.py [--classes 10000] [--images 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from oodbench.benchmarks.cood import per_class_mean, severity_windows, split_per_class

RESULTS = Path(__file__).resolve().parent / "results" / "bench_cood.json"


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=10_000)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--levels", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    class_ids = np.sort(rng.choice(10**8, size=args.classes, replace=False))  # wnid-like labels
    labels = rng.permutation(np.repeat(class_ids, args.images))
    class_shift = rng.normal(size=args.classes)  # each class its own mean confidence
    kappa = class_shift[np.searchsorted(class_ids, labels)] + rng.normal(size=labels.size)
    means = per_class_mean(kappa, labels)[1]

    stages = {
        "split_per_class (75/25, seeded)": lambda: split_per_class(labels, seed=0),
        "per_class_mean (bincount)": lambda: per_class_mean(kappa, labels),
        "severity_windows (sort + cumsum)": lambda: severity_windows(
            means, window=args.window, n_levels=args.levels
        ),
        "per_class_mean + severity_windows": lambda: severity_windows(
            per_class_mean(kappa, labels)[1], window=args.window, n_levels=args.levels
        ),
    }
    timings = {name: best_of(fn, args.repeats) for name, fn in stages.items()}

    title = (f"C-OOD levels: {args.classes:,} classes x {args.images} images "
             f"({labels.size:,} scores), window {args.window}, {args.levels} levels")
    print(title)
    print(f"{'stage':<38}{'best of ' + str(args.repeats):>14}")
    for name, seconds in timings.items():
        print(f"{name:<38}{seconds * 1e3:>11.1f} ms")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "bench_cood",
        "classes": args.classes,
        "images_per_class": args.images,
        "window": args.window,
        "levels": args.levels,
        "repeats": args.repeats,
        "seconds_best": timings,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
