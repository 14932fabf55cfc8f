"""Throughput of ``extract`` against a bare forward loop over the same DataLoader, and a cache hit.

For each model (random weights; speed does not depend on them) over a temporary image folder of
random 256 px JPEGs (decoded and preprocessed by the model's own transform):

* bare: ``for x, _, _ in loader: model(x)`` under ``torch.inference_mode`` (and the same
  autocast / channels-last as extract on CUDA), with the DataLoader ``extract`` itself builds;
* extract: ``extract(model, source, capture=("logits", "features"), progress=False)`` into an
  empty cache (forward pass + copies to the host + checks + shard writes + final arrays);
* cache hit: the same call again (key computation incl. hashing the weights, memory-mapping).

Runs alternate bare/extract; the table gives the median and the best of ``--repeats`` runs and
the overhead of extract over bare for both. Prints a table; writes
``speed/results/bench_extract.json`` (one entry per device, others kept).

    python speed/bench_extract.py --quick                  # CPU, resnet50, 48 images
    python speed/bench_extract.py --device cuda [--quick]  # resnet50 + ViT-B/16 with AMP
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from oodbench.data import ImageFolder
from oodbench.extract import extract
from oodbench.extract.loader import make_loader, plan_batches, to_device
from oodbench.extract.runtime import autocast, precision_name, resolve_amp, resolve_device
from oodbench.models import load

RESULTS = Path(__file__).resolve().parent / "results" / "bench_extract.json"
MODELS = {"cpu": ["timm:resnet50"], "cuda": ["timm:resnet50", "timm:vit_base_patch16_224"]}
#: (images, batch size, repeats) per device for the full and the --quick run
SIZES = {
    ("cpu", False): (256, 32, 3),
    ("cpu", True): (48, 16, 3),
    ("cuda", False): (8192, 256, 3),
    ("cuda", True): (2048, 256, 2),
}


def make_folder(root: Path, n: int) -> ImageFolder:
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)
    return ImageFolder(root)


def bare_loop(model, source, batch_size: int, device: torch.device, amp: str) -> Callable[[], None]:
    """The reference: the DataLoader extract uses and a plain forward, nothing else."""
    amp_dtype = resolve_amp(amp, device)
    channels_last = device.type == "cuda" and amp_dtype is not None
    batches = plan_batches(np.arange(len(source)), batch_size)

    def run() -> None:
        loader = make_loader(source, model.transform, batches, device=device)
        model.eval().to(device)
        if channels_last:
            model.to(memory_format=torch.channels_last)
        with torch.inference_mode(), autocast(device, amp_dtype):
            for x, _, _ in loader:
                model(to_device(x, device, channels_last))
        if device.type == "cuda":
            torch.cuda.synchronize()

    return run


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads): on a shared machine the CPU
    time is the steadier measure of the work done; the wall time is what a user waits."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_model(spec: str, source, n: int, batch_size: int, repeats: int, device, amp: str,
                scratch: Path) -> dict:
    model = load(spec, pretrained=False)
    bare_run = bare_loop(model, source, batch_size, device, amp)
    caches = itertools.count()

    def run_extract():
        return extract(model, source, batch_size=batch_size, device=device, amp=amp,
                       progress=False)

    def extract_fresh():
        os.environ["OODBENCH_CACHE"] = str(scratch / f"cache{next(caches)}")
        return run_extract()

    warm = source.subset(np.arange(min(n, 2 * batch_size)))
    bare_loop(model, warm, batch_size, device, amp)()  # threads, allocator, cudnn autotune
    bare, ext = [], []
    for _ in range(repeats):
        bare.append(timed(bare_run))
        ext.append(timed(extract_fresh))
    hit_s = timed(run_extract)[0]  # the cache of the last timed run
    bare_s, extract_s = [w for w, _ in bare], [w for w, _ in ext]
    bare_cpu, extract_cpu = [c for _, c in bare], [c for _, c in ext]
    assert run_extract().meta["cache_hit"], "the call after a complete run must be a cache hit"

    def rate(seconds: float) -> float:
        return n / seconds

    row = {
        "model": spec,
        "precision": precision_name(resolve_amp(amp, device)),
        "images": n,
        "batch_size": batch_size,
        "repeats": repeats,
        "bare_img_s_median": rate(statistics.median(bare_s)),
        "bare_img_s_best": rate(min(bare_s)),
        "extract_img_s_median": rate(statistics.median(extract_s)),
        "extract_img_s_best": rate(min(extract_s)),
        "cache_hit_s": hit_s,
        "bare_s": bare_s,
        "extract_s": extract_s,
        "bare_cpu_s": bare_cpu,
        "extract_cpu_s": extract_cpu,
        "overhead_cpu_pct_median": 100 * (statistics.median(extract_cpu) / statistics.median(bare_cpu) - 1),
    }
    row["overhead_pct_median"] = 100 * (statistics.median(extract_s) / statistics.median(bare_s) - 1)
    row["overhead_pct_best"] = 100 * (min(extract_s) / min(bare_s) - 1)
    return row


def print_table(rows: list[dict], title: str) -> None:
    print(title)
    header = (f"{'model':<26}{'prec':>9}{'bare img/s':>16}{'extract img/s':>16}"
              f"{'overhead (wall)':>19}{'overhead (CPU)':>16}{'cache hit':>11}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['model']:<26}{r['precision']:>9}"
              f"{_pair(r['bare_img_s_median'], r['bare_img_s_best'], '.1f'):>16}"
              f"{_pair(r['extract_img_s_median'], r['extract_img_s_best'], '.1f'):>16}"
              f"{_pair(r['overhead_pct_median'], r['overhead_pct_best'], '+.1f', '%'):>19}"
              f"{r['overhead_cpu_pct_median']:>+15.1f}%"
              f"{r['cache_hit_s'] * 1e3:>8.0f} ms")
    print("median of the runs (best run in brackets); overhead = extract time / bare time - 1, "
          "in wall time and in CPU time of this process")


def _pair(median: float, best: float, fmt: str, unit: str = "") -> str:
    return f"{median:{fmt}}{unit} ({best:{fmt}}{unit})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="fewer images (about a minute on CPU)")
    parser.add_argument("--images", type=int, help="override the number of images")
    parser.add_argument("--batch-size", type=int, help="override the batch size")
    parser.add_argument("--repeats", type=int, help="override the number of timed runs")
    parser.add_argument("--amp", default="auto", choices=["auto", "off", "bf16", "fp16"])
    args = parser.parse_args()

    device = resolve_device(args.device)
    n, batch_size, repeats = SIZES[(device.type, args.quick)]
    n, batch_size, repeats = args.images or n, args.batch_size or batch_size, args.repeats or repeats
    with tempfile.TemporaryDirectory(prefix="bench_extract_") as tmp:
        scratch = Path(tmp)
        source = make_folder(scratch / "images", n)
        rows = [bench_model(spec, source, n, batch_size, repeats, device, args.amp, scratch)
                for spec in MODELS[device.type]]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    title = (f"extract vs bare forward loop: {n} random 256 px JPEGs -> 224 px, batch {batch_size}, "
             f"{device.type} ({name or platform.machine()}, {torch.get_num_threads()} threads)")
    print_table(rows, title)

    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[device.type] = {
        "benchmark": "bench_extract",
        "quick": args.quick,
        "device_name": name,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
