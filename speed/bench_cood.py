"""The C-OOD benchmark at the paper's scale: level construction, and peak memory and time of a
whole run as the pool grows from 1,000 to 10,000 classes.

1. Levels (in memory): per-class mean kappa (``per_class_mean``) and the severity windows
   (``severity_windows``) for N classes x M images with non-contiguous class labels.
2. End to end (memory-mapped, one fresh process per pool size): synthetic activations written
   as ``.npy`` files under ``OODBENCH_CACHE`` (no images): an ID test set of 50,000 rows and a
   pool of ``classes x images`` rows, all with logits of 1,000 classes (float32; 10,000 x 200
   is 2 million rows, 8 GB of logits). ``CoodBenchmark(...).run(None, [msp, energy])`` on the
   memory-mapped arrays, timed, with the process's peak resident set (``VmHWM`` of
   ``/proc/self/status``; not ``ru_maxrss``, which Linux carries over from the parent process
   across ``exec``) and its peak anonymous memory (``RssAnon``, sampled every 10 ms: memory the
   process owns, without the file pages it maps) next to both before the run, and the bytes it
   read from storage (``read_bytes`` of ``/proc/self/io``: the pool not served by the page cache).

The window is fixed (default 100 classes, 11 levels) so that only the pool grows between sizes.
Prints tables and writes ``speed/results/bench_cood.json``.

    python speed/bench_cood.py                                # 1,000 / 3,000 / 10,000 classes
    python speed/bench_cood.py --sizes 1000,10000 --images 200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from oodbench.benchmarks.cood import per_class_mean, severity_windows, split_per_class

RESULTS = Path(__file__).resolve().parent / "results" / "bench_cood.json"
ID_ROWS = 50_000
LOGIT_CLASSES = 1000
WRITE_ROWS = 32_768  # rows generated and written at a time
NOISE_ROWS = 8192


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# -- 1. levels -----------------------------------------------------------------------------------
def level_stages(classes: int, images: int, window: int, levels: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    class_ids = np.sort(rng.choice(10**8, size=classes, replace=False))  # wnid-like labels
    labels = rng.permutation(np.repeat(class_ids, images))
    class_shift = rng.normal(size=classes)  # each class its own mean confidence
    kappa = class_shift[np.searchsorted(class_ids, labels)] + rng.normal(size=labels.size)
    means = per_class_mean(kappa, labels)[1]
    stages = {
        "split_per_class (75/25, seeded)": lambda: split_per_class(labels, seed=0),
        "per_class_mean (bincount)": lambda: per_class_mean(kappa, labels),
        "severity_windows (sort + cumsum)": lambda: severity_windows(means, window=1000, n_levels=levels),
        "per_class_mean + severity_windows": lambda: severity_windows(
            per_class_mean(kappa, labels)[1], window=1000, n_levels=levels
        ),
    }
    return {name: best_of(fn, repeats) for name, fn in stages.items()}


# -- 2. end to end -------------------------------------------------------------------------------
def write_logits(path: Path, labels: np.ndarray, scale: np.ndarray, shift: np.ndarray,
                 rng: np.random.Generator) -> None:
    """``labels.size`` rows of float32 logits: ``noise * scale[label]`` plus a one-hot ``shift``
    at column ``label % 1000``, written chunk by chunk (bounded memory)."""
    noise = rng.standard_normal((NOISE_ROWS, LOGIT_CLASSES), dtype=np.float32)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                    shape=(labels.size, LOGIT_CLASSES))
    for start in range(0, labels.size, WRITE_ROWS):
        rows = np.arange(start, min(start + WRITE_ROWS, labels.size))
        block = noise[rows % NOISE_ROWS] * scale[rows][:, None]
        block[np.arange(rows.size), labels[rows] % LOGIT_CLASSES] += shift[rows]
        out[rows[0] : rows[-1] + 1] = block
    out.flush()
    del out


def write_activations(folder: Path, classes: int, images: int, id_rows: int) -> dict:
    """The ID set and a pool of ``classes x images`` rows as .npy files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(classes)
    id_labels = rng.integers(0, LOGIT_CLASSES, id_rows)
    write_logits(folder / "id_logits.npy", id_labels, np.full(id_rows, 2.0, np.float32),
                 np.full(id_rows, 8.0, np.float32), rng)
    np.save(folder / "id_labels.npy", id_labels)
    pool_ids = 10_000_000 + 7 * np.arange(classes)  # non-contiguous pool class ids
    pool_labels = np.repeat(pool_ids, images)  # a class-ordered pool list, as the cache holds it
    per_class = rng.uniform(0.5, 3.0, classes)  # each class its own confidence
    write_logits(folder / "pool_logits.npy", pool_labels, np.repeat(per_class, images).astype(np.float32),
                 np.repeat(per_class * 2.0, images).astype(np.float32), rng)
    np.save(folder / "pool_labels.npy", pool_labels)
    return {"pool_rows": int(pool_labels.size),
            "pool_logits_gb": round(pool_labels.size * LOGIT_CLASSES * 4 / 1e9, 3)}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


class PeakAnon:
    """Samples ``RssAnon`` every 10 ms in a thread; ``peak_mib`` is the largest value seen."""

    def __init__(self) -> None:
        self.peak = _status_kib("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _status_kib("RssAnon"))

    def __enter__(self) -> PeakAnon:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _status_kib("RssAnon"))


def child(folder: Path, window: int, levels: int) -> dict:
    """One measured run on the memory-mapped files of ``folder`` (in a fresh process)."""
    from oodbench.benchmarks.cood import CoodBenchmark
    from oodbench.detectors import create
    from oodbench.extract.activations import Activations

    def acts(prefix: str) -> Activations:
        logits = np.load(folder / f"{prefix}_logits.npy", mmap_mode="r")
        labels = np.load(folder / f"{prefix}_labels.npy", mmap_mode="r")
        return Activations(logits=logits, labels=labels, ids=np.arange(len(labels)).astype(str))

    id_acts, pool = acts("id"), acts("pool")
    detectors = [create("msp"), create("energy")]
    before = {"rss_mib": _status_kib("VmRSS") / 1024, "anon_mib": _status_kib("RssAnon") / 1024,
              "read_bytes": _read_bytes()}
    with PeakAnon() as anon:
        start = time.perf_counter()
        bench = CoodBenchmark(id_acts, pool, window=window, n_levels=levels)
        table = bench.run(None, detectors)
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rss_before_mib": before["rss_mib"],
        "anon_before_mib": before["anon_mib"],
        "peak_rss_mib": _status_kib("VmHWM") / 1024,
        "storage_read_gb": (_read_bytes() - before["read_bytes"]) / 1e9,
        "peak_anon_mib": anon.peak / 1024,
        "rows_out": len(table),
        "mean_auroc_level_0": float(table[table["level"] == 0]["auroc"].mean()),
    }


def end_to_end(sizes: list[int], images: int, window: int, levels: int, keep: bool,
               id_rows: int) -> list[dict]:
    from oodbench.config import cache_dir

    rows = []
    for classes in sizes:
        folder = cache_dir() / "bench_cood" / f"{classes}x{images}"
        t0 = time.perf_counter()
        info = write_activations(folder, classes, images, id_rows)
        written = time.perf_counter() - t0
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(folder), "--window", str(window),
             "--levels", str(levels)],
            capture_output=True, text=True, check=True, env=os.environ.copy(),
        )
        row = {"classes": classes, "images_per_class": images, **info, "write_s": written,
               **json.loads(out.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(f"{classes:>7,} classes  {row['pool_rows']:>10,} rows  {row['pool_logits_gb']:>6.2f} GB  "
              f"run {row['seconds']:8.1f} s  peak RSS {row['peak_rss_mib']:8.0f} MiB "
              f"(before {row['rss_before_mib']:6.0f})  peak anon {row['peak_anon_mib']:7.0f} MiB "
              f"(before {row['anon_before_mib']:6.0f})  read {row['storage_read_gb']:5.2f} GB from storage",
              flush=True)
        if not keep:
            shutil.rmtree(folder)
    return rows


def growth(rows: list[dict]) -> dict:
    """How time and memory grow from the smallest to the largest pool (ratios; 10x pool = 10)."""
    small, large = rows[0], rows[-1]
    pool = large["pool_rows"] / small["pool_rows"]

    def over_baseline(row: dict, peak: str, base: str) -> float:
        return row[peak] - row[base]

    return {
        "pool_ratio": pool,
        "time_ratio": large["seconds"] / small["seconds"],
        "peak_rss_ratio": large["peak_rss_mib"] / small["peak_rss_mib"],
        "peak_anon_ratio": large["peak_anon_mib"] / small["peak_anon_mib"],
        "anon_above_baseline_mib": [over_baseline(r, "peak_anon_mib", "anon_before_mib") for r in rows],
        "anon_bytes_per_pool_row": (
            (over_baseline(large, "peak_anon_mib", "anon_before_mib")
             - over_baseline(small, "peak_anon_mib", "anon_before_mib")) * 2**20
            / (large["pool_rows"] - small["pool_rows"])
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=10_000, help="classes of the levels timing")
    parser.add_argument("--sizes", default="1000,3000,10000", help="pool classes of the runs")
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--levels", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--id-rows", type=int, default=ID_ROWS)
    parser.add_argument("--keep", action="store_true", help="keep the synthetic .npy files")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.window, args.levels)))
        return

    stages = level_stages(args.classes, args.images, args.window, args.levels, args.repeats)
    print(f"C-OOD levels: {args.classes:,} classes x {args.images} images "
          f"({args.classes * args.images:,} scores), window 1000, {args.levels} levels")
    for name, seconds in stages.items():
        print(f"  {name:<38}{seconds * 1e3:>11.1f} ms (best of {args.repeats})")

    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"\nEnd to end (msp + energy, window {args.window}, {args.levels} levels, ID {args.id_rows:,} "
          f"rows, logits of {LOGIT_CLASSES} classes, memory-mapped):")
    rows = end_to_end(sizes, args.images, args.window, args.levels, args.keep, args.id_rows)
    summary = growth(rows) if len(rows) > 1 else {}
    if summary:
        print(f"\npool x{summary['pool_ratio']:.0f}: time x{summary['time_ratio']:.2f}, peak RSS "
              f"x{summary['peak_rss_ratio']:.2f}, peak anonymous memory x{summary['peak_anon_ratio']:.2f} "
              f"({summary['anon_bytes_per_pool_row']:.0f} bytes per pool row above the baseline)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "bench_cood",
        "levels": {"classes": args.classes, "images_per_class": args.images, "window": 1000,
                   "levels": args.levels, "repeats": args.repeats, "seconds_best": stages},
        "end_to_end": {"id_rows": args.id_rows, "logit_classes": LOGIT_CLASSES, "window": args.window,
                       "levels": args.levels, "detectors": ["msp", "energy"], "runs": rows,
                       "growth": summary},
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
