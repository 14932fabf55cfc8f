"""What a cache hit costs when its arrays are verified, and what a subset request saves.

A cache entry of ``--images`` rows with ImageNet-sized logits (1000) and features (1280, as
EfficientNet-Lite0) is written once by a stand-in classifier (a linear map of 8x8 pixels: the
forward pass is not what is measured). Then, each in a new Python process (verification is once
per process and file version):

* hit, verified: ``extract`` of the same (model, source): memory-maps the arrays and checks
  each file's sha256 on first open (``OODBENCH_CACHE_VERIFY=1``, the default);
* hit, not verified: the same with ``OODBENCH_CACHE_VERIFY=0``;
* hit again: a second ``extract`` in the same process (the files are not hashed again);
* subset hit: ``capture=("logits",)`` served by the logits+features entry (no forward pass).

Prints a table; writes ``speed/results/bench_cache.json``.

    python speed/bench_cache.py            # 50,000 rows (ImageNet validation size)
    python speed/bench_cache.py --quick    # 5,000 rows
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

RESULTS = Path(__file__).resolve().parent / "results" / "bench_cache.json"
NUM_CLASSES, FEATURES = 1000, 1280


class PixelNet(nn.Module):
    """A stand-in classifier: 8x8 grey pixels -> 1280 features -> 1000 logits."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.body = nn.Linear(64, FEATURES)
        self.fc = nn.Linear(FEATURES, NUM_CLASSES)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)


def _identity(features: torch.Tensor) -> torch.Tensor:
    return features


def model_and_source(n: int):
    from oodbench.data import ArraySource
    from oodbench.models import wrap

    net = PixelNet()
    body = nn.Sequential(nn.Flatten(), net.body)
    module = nn.Sequential()
    module.add_module("features", body)
    module.add_module("fc", net.fc)

    def transform(image):
        grey = np.asarray(image.convert("L"), dtype=np.float32) / 255.0
        return torch.from_numpy(grey)[None]

    model = wrap(module, feature_layer="features", head_layer="fc", transform=transform,
                 pool=_identity, spec="bench:pixelnet")
    images = np.random.default_rng(0).integers(0, 256, size=(n, 8, 8, 3), dtype=np.uint8)
    return model, ArraySource(images, np.zeros(n, dtype=np.int64), name=f"pixels-{n}")


def child(n: int, capture: tuple[str, ...], twice: bool) -> None:
    """Time ``extract`` hits in this (new) process; print the seconds as JSON."""
    from oodbench.extract import extract

    model, source = model_and_source(n)
    times = []
    for _ in range(2 if twice else 1):
        tic = time.perf_counter()
        acts = extract(model, source, capture=capture, batch_size=512, progress=False)
        times.append(time.perf_counter() - tic)
        assert acts.meta["cache_hit"], "the entry must already be complete"
    print(json.dumps(times))


def in_new_process(n: int, capture: tuple[str, ...], verify: bool, twice: bool = False) -> list[float]:
    env = {**os.environ, "OODBENCH_CACHE_VERIFY": "1" if verify else "0"}
    out = subprocess.run([sys.executable, __file__, "--child", str(n), *capture, *(["--twice"] if twice else [])],
                         env=env, check=True, capture_output=True, text=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 rows instead of 50,000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--twice", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("capture", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, tuple(args.capture), args.twice)
        return
    n = 5_000 if args.quick else 50_000
    with tempfile.TemporaryDirectory(prefix="bench_cache_") as tmp:
        os.environ["OODBENCH_CACHE"] = tmp
        from oodbench.extract import extract

        model, source = model_and_source(n)
        tic = time.perf_counter()
        acts = extract(model, source, capture=("logits", "features"), batch_size=512, progress=False)
        write_s = time.perf_counter() - tic
        entry = Path(acts.meta["cache_path"])
        size = sum(p.stat().st_size for p in entry.glob("*.npy"))
        del acts
        runs = {"verified": [], "not_verified": [], "again": [], "subset": []}
        for _ in range(args.repeats):
            first, again = in_new_process(n, ("logits", "features"), verify=True, twice=True)
            runs["verified"].append(first)
            runs["again"].append(again)
            runs["not_verified"] += in_new_process(n, ("logits", "features"), verify=False)
            runs["subset"] += in_new_process(n, ("logits",), verify=True)
    median = {k: statistics.median(v) for k, v in runs.items()}
    print(f"cache hits of a {n:,}-row entry (logits {NUM_CLASSES} + features {FEATURES}, float32: "
          f"{size / 2**20:,.0f} MiB), each in a new process; median of {args.repeats}")
    print(f"{'hit':<44}{'seconds':>10}")
    labels = {"verified": "verified on first open (default)", "not_verified": "OODBENCH_CACHE_VERIFY=0",
              "again": "second hit in the same process", "subset": "subset request (logits only), verified"}
    for key, label in labels.items():
        print(f"{label:<44}{median[key]:>10.3f}")
    rate = size / 2**20 / max(median["verified"] - median["not_verified"], 1e-9)
    print(f"verification: {rate:,.0f} MiB/s of sha256 over the arrays read (writing the entry: "
          f"{write_s:.1f} s)")
    results = {
        "benchmark": "bench_cache",
        "rows": n,
        "entry_mib": size / 2**20,
        "repeats": args.repeats,
        "seconds": runs,
        "median_s": median,
        "write_entry_s": write_s,
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
