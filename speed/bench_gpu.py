"""One GPU, end to end: ResNet-50 extraction against a bare PyTorch loop, and the detector suite's
time next to the forward pass.

On ``--images`` synthetic JPEGs (random 320 px pictures, decoded and preprocessed by the model's
own transform: resize 256, crop 224), batch ``--batch-size``, ResNet-50 (timm, random weights;
speed does not depend on them), AMP bf16 and channels-last:

* bare: a plain PyTorch loop: ``DataLoader(num_workers, pin_memory=True)`` over the decoded
  images, ``x.to(device, non_blocking=True)``, ``model(x)`` under ``torch.inference_mode``;
* extract: ``oodbench.extract.extract(model, source, amp="bf16", num_workers=...)`` into an
  empty cache (the same work plus copies to the host, checks and shard writes);
* forward only: the model on one preloaded batch, repeated to ``--images`` rows (no data
  loading): the GPU's own ceiling;
* detectors: every detector that runs from logits, features and the head (not the
  live-network, CLIP-text or feature-map ones), fitted on the extracted activations and scoring
  them, on the torch path on the GPU
  (``oodbench.compute.use("torch", device)``); their total time is given as a ratio to the
  forward pass over the same images;
* KNN on the GPU: fit + score of ``knn`` (k = 50) with a ``--bank``-row synthetic bank of
  ResNet-50 shape (``bench_detectors``' arrays) and the extracted rows as queries, once with
  faiss-gpu's flat index (when ``faiss-gpu`` is installed: ``pip install oodbench[gpu]``) and
  once on oodbench's exact tiled ``matmul`` + ``topk`` path, with the largest difference of
  their scores;
* parity: every array detector's scores on the GPU's torch path against the NumPy path on the
  CPU, on the extracted activations (largest absolute difference over the largest score;
  ``tests/detectors/test_backends.py`` asks 1e-5 relative of them on a stand-in device).

Prints a table and writes ``speed/results/bench_gpu.json``. Without CUDA it says so and
exits with status 2 (``--device cpu`` runs the same steps on the CPU, as a check of the script).

    python speed/bench_gpu.py                       # 8,192 images, batch 256, cuda
    python speed/bench_gpu.py --device cpu --images 64 --batch-size 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bench_detectors import make_acts, make_head
from oodbench import compute
from oodbench.data import ImageFolder
from oodbench.detectors import _neighbours, available, create
from oodbench.errors import OodbenchError
from oodbench.extract import extract
from oodbench.models import load

RESULTS = Path(__file__).resolve().parent / "results" / "bench_gpu.json"
NO_CUDA_EXIT = 2
MODEL = "timm:resnet50"


def make_jpegs(root: Path, n: int, size: int = 320) -> ImageFolder:
    """``n`` random ``size`` px JPEGs in ten class folders (written once, decoded every pass)."""
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(
            folder / f"{i:06d}.jpg", quality=90)
    return ImageFolder(root)


class Decoded(torch.utils.data.Dataset):
    """The bare loop's dataset: open a JPEG, run the transform."""

    def __init__(self, paths: list[Path], transform):
        self.paths, self.transform = paths, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        with Image.open(self.paths[i]) as image:
            return self.transform(image.convert("RGB"))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop(model, paths: list[Path], batch_size: int, workers: int, device: torch.device) -> float:
    """Seconds of a plain DataLoader + forward loop (AMP bf16, channels-last, pinned memory)."""
    loader = torch.utils.data.DataLoader(
        Decoded(paths, model.transform), batch_size=batch_size, num_workers=workers,
        pin_memory=device.type == "cuda", persistent_workers=False)
    net = model.eval().to(device).to(memory_format=torch.channels_last)
    start = time.perf_counter()
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
        for x in loader:
            net(x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last))
    synchronize(device)
    return time.perf_counter() - start


def forward_only(model, n: int, batch_size: int, device: torch.device) -> float:
    """Seconds of the forward pass alone over ``n`` images (one batch in device memory)."""
    net = model.eval().to(device).to(memory_format=torch.channels_last)
    x = torch.randn(batch_size, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
        net(x)  # warm up (cudnn autotuning)
        synchronize(device)
        start = time.perf_counter()
        for _ in range(0, n, batch_size):
            net(x)
        synchronize(device)
    return time.perf_counter() - start


def array_detectors() -> list[str]:
    """Every registered detector that runs from logits, features and the head alone (not the
    live-network, CLIP-text or feature-map ones: the extraction here keeps no feature map)."""
    skip = {"model", "text_embeddings", "feature_map"}
    return [d["name"] for d in available() if not skip & set(d["requires"])]


def fitted(name: str, acts):
    """``create(name)`` fitted on ``acts`` in whichever role it fits on (none, train, id_val)."""
    det = create(name)
    fit = acts if det.fits_on_data else None
    return det.fit(fit, id_val=fit)


def detector_suite(acts, device: torch.device) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds of fit + score of every array detector on ``acts`` (fit and scored on the same
    rows), on the torch path on ``device``; and the detectors that do not apply, with why."""
    times, skipped = {}, {}
    with compute.use("torch", device):
        for name in array_detectors():
            start = time.perf_counter()
            try:
                fitted(name, acts).score(acts)
            except OodbenchError as err:  # e.g. MOS needs a group-softmax head
                skipped[name] = f"{type(err).__name__}: {err}"
                continue
            synchronize(device)
            times[name] = time.perf_counter() - start
    return times, skipped


def knn_paths(acts, bank_rows: int, device: torch.device) -> dict[str, object]:
    """Seconds of KNN's fit + score with faiss-gpu and on the tiled torch path, and how far
    apart their scores are."""
    rng = np.random.default_rng(0)
    head = make_head(acts.num_classes, acts.features.shape[1], rng)
    bank = make_acts(bank_rows, head, rng)
    out: dict[str, object] = {"bank": bank_rows, "queries": len(acts), "k": 50,
                              "faiss_gpu_installed": hasattr(_neighbours.faiss, "StandardGpuResources")}
    scores = {}
    original = _neighbours._faiss_gpu
    for path in ("faiss_gpu", "tiled_torch"):
        if path == "faiss_gpu" and not out["faiss_gpu_installed"]:
            out[path] = "not installed (pip install oodbench[gpu])"
            continue
        if path == "tiled_torch":
            _neighbours._faiss_gpu = lambda backend: False  # type: ignore[assignment]
        try:
            with compute.use("torch", device):
                det = create("knn", k=50)
                start = time.perf_counter()
                det.fit(bank)
                fitted = time.perf_counter()
                scores[path] = det.score(acts)
                synchronize(device)
                out[path] = {"fit_s": fitted - start, "score_s": time.perf_counter() - fitted}
        finally:
            _neighbours._faiss_gpu = original
    if len(scores) == 2:
        out["max_abs_diff"] = float(np.abs(scores["faiss_gpu"] - scores["tiled_torch"]).max())
    return out


def parity(acts, device: torch.device) -> dict[str, object]:
    """Largest |torch on the GPU - NumPy| over the largest |score|, per array detector."""
    out: dict[str, object] = {}
    for name in array_detectors():
        try:
            with compute.use("numpy"):
                reference = fitted(name, acts).score(acts)
            with compute.use("torch", device):
                scores = fitted(name, acts).score(acts)
        except OodbenchError as err:
            out[name] = f"not applicable: {type(err).__name__}"
            continue
        scale = max(float(np.abs(reference).max()), 1e-300)
        out[name] = float(np.abs(scores - reference).max()) / scale
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--images", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--bank", type=int, default=100_000, help="KNN bank rows")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu.py measures a CUDA GPU, and torch sees none here (torch.cuda.is_available() "
              "is False). Run it on a machine with an NVIDIA GPU and a CUDA build of torch, or "
              "pass --device cpu to check the script on the CPU.", file=sys.stderr)
        return NO_CUDA_EXIT

    model = load(MODEL, pretrained=False)
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        source = make_jpegs(Path(tmp) / "images", args.images)
        paths = [source.root / rel for rel in source.ids]
        warm = paths[: 2 * args.batch_size]
        bare_loop(model, warm, args.batch_size, args.workers, device)  # workers, allocator, cudnn
        bare_s = bare_loop(model, paths, args.batch_size, args.workers, device)
        os.environ["OODBENCH_CACHE"] = str(Path(tmp) / "cache")
        start = time.perf_counter()
        acts = extract(model, source, batch_size=args.batch_size, device=device, amp="bf16",
                       num_workers=args.workers, progress=False)
        extract_s = time.perf_counter() - start
        forward_s = forward_only(model, args.images, args.batch_size, device)
        suite, skipped = detector_suite(acts, device)
        knn = knn_paths(acts, args.bank, device)
        agreement = parity(acts, device)
    suite_s = sum(suite.values())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    n = args.images
    print(f"{MODEL} on {n:,} synthetic JPEGs, batch {args.batch_size}, {args.workers} workers, "
          f"AMP bf16, channels-last, {device} ({name or platform.machine()})")
    print(f"  bare PyTorch loop      {n / bare_s:10.1f} images/s")
    print(f"  oodbench extract       {n / extract_s:10.1f} images/s   ({bare_s / extract_s:.2f} x bare)")
    print(f"  forward only           {n / forward_s:10.1f} images/s")
    print(f"  detector suite         {suite_s:10.2f} s for {len(suite)} detectors = "
          f"{suite_s / forward_s:.2f} x the forward pass over the same images")
    for det, seconds in sorted(suite.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {det:<22}{seconds:8.3f} s")
    for det, why in skipped.items():
        print(f"    {det:<22}not applicable: {why[:100]}")
    print(f"  KNN, {knn['bank']:,}-row bank, {knn['queries']:,} queries, k=50:")
    for path in ("faiss_gpu", "tiled_torch"):
        t = knn.get(path)
        shown = f"fit {t['fit_s']:.3f} s, score {t['score_s']:.3f} s" if isinstance(t, dict) else t
        print(f"    {path:<20}{shown}")
    if "max_abs_diff" in knn:
        print(f"    scores differ by at most {knn['max_abs_diff']:.2e}")
    worst = max((v for v in agreement.values() if isinstance(v, float)), default=float("nan"))
    print(f"  GPU torch path vs NumPy: largest difference {worst:.2e} of the largest score "
          f"over {sum(isinstance(v, float) for v in agreement.values())} detectors")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "bench_gpu", "model": MODEL, "device": str(device), "device_name": name,
        "images": n, "batch_size": args.batch_size, "workers": args.workers, "amp": "bf16",
        "bare_img_s": n / bare_s, "extract_img_s": n / extract_s, "forward_img_s": n / forward_s,
        "detector_suite_s": suite_s, "detector_suite_over_forward": suite_s / forward_s,
        "detectors_s": suite, "not_applicable": skipped, "knn": knn,
        "gpu_vs_numpy_max_abs_diff_over_max_abs": agreement,
        "torch": torch.__version__, "cpus": os.cpu_count(),
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
