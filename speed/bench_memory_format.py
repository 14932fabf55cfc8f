"""CPU forward pass in contiguous against channels-last memory format, per model family.

What ``channels_last`` would buy ``extract`` on the CPU, where it stays contiguous
(``oodbench.extract.runtime.uses_channels_last`` says why: the values must not depend on how
the images were sharded). For each model
(EfficientNet-Lite0 with its real ImageNet weights, the others at random init: speed does not
depend on the weights) it times ``model(x)`` under ``torch.inference_mode`` on a fixed random
batch, alternating the two formats, and reports the median of ``--repeats`` runs per format and
the ratio (contiguous / channels-last: above 1 means channels-last is faster), at one thread and
at torch's default thread count; then EfficientNet-Lite0's milliseconds per image by batch size
(contiguous, one thread: small batches keep its depthwise layers' activations in cache). Prints
a table; writes
``speed/results/bench_memory_format.json``.

    python speed/bench_memory_format.py            # five families, 3 repeats
    python speed/bench_memory_format.py --quick    # smaller batches, 2 repeats
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

OUT = Path(__file__).with_name("results") / "bench_memory_format.json"


def _lite0() -> torch.nn.Module:
    from oodbench.models import load

    return load("efficientnet_lite0")


def _torchvision(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        return getattr(torchvision.models, name)()
    return build


def _timm(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import timm

        return timm.create_model(name, pretrained=False)
    return build


#: (label, builder, input shape of one image)
MODELS: list[tuple[str, Callable[[], torch.nn.Module], tuple[int, ...]]] = [
    ("efficientnet_lite0 (real weights)", _lite0, (3, 224, 224)),
    ("resnet18", _torchvision("resnet18"), (3, 224, 224)),
    ("resnet50", _torchvision("resnet50"), (3, 224, 224)),
    ("convnext_tiny", _timm("convnext_tiny"), (3, 224, 224)),
    ("resnet18 at 32 px", _torchvision("resnet18"), (3, 32, 32)),
]


def time_formats(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> tuple[float, float]:
    """Median seconds of ``model(x)`` contiguous and channels-last, runs alternating."""
    model.eval()
    plain, last = [], []
    cl_model = None
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first round warms both up and is not counted
            model.to(memory_format=torch.contiguous_format)  # type: ignore[call-arg]
            t = time.perf_counter()
            model(x)
            plain.append(time.perf_counter() - t)
            cl_model = model.to(memory_format=torch.channels_last)  # type: ignore[call-arg]
            xl = x.contiguous(memory_format=torch.channels_last)
            t = time.perf_counter()
            cl_model(xl)
            last.append(time.perf_counter() - t)
    return statistics.median(plain[1:]), statistics.median(last[1:])


def batch_sizes(repeats: int, sizes: tuple[int, ...] = (64, 32, 16, 8, 4)) -> list[dict]:
    """EfficientNet-Lite0 (contiguous, one thread, logits + features + feature map as
    ``extract`` captures them): milliseconds per image by batch size over the same 64 images."""
    torch.set_num_threads(1)
    model = _lite0().eval()
    torch.manual_seed(0)
    x = torch.randn(64, 3, 224, 224)
    capture = ("logits", "features", "feature_map")
    out = []
    with torch.inference_mode():
        for bs in sizes:
            model.forward_all(x[:bs], capture)  # warm-up
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                for i in range(0, 64, bs):
                    model.forward_all(x[i:i + bs], capture)
                times.append(time.perf_counter() - t)
            out.append({"batch": bs, "ms_per_image": 1e3 * statistics.median(times) / 64})
            print(f"efficientnet_lite0 contiguous, one thread, batch {bs:3d}: "
                  f"{out[-1]['ms_per_image']:6.1f} ms/img", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 4 (8 at 32 px), 2 repeats")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 3)
    default_threads = torch.get_num_threads()
    rows = []
    for threads in sorted({1, default_threads}):
        torch.set_num_threads(threads)
        for label, build, shape in MODELS:
            batch = (8 if args.quick else 64) if shape[-1] <= 32 else (4 if args.quick else 16)
            torch.manual_seed(0)
            x = torch.randn(batch, *shape)
            plain, last = time_formats(build(), x, repeats)
            rows.append({"model": label, "threads": threads, "batch": batch,
                         "contiguous_ms_per_image": 1e3 * plain / batch,
                         "channels_last_ms_per_image": 1e3 * last / batch,
                         "ratio": plain / last})
            r = rows[-1]
            print(f"{label:36s} threads={threads} batch={batch:3d}  contiguous "
                  f"{r['contiguous_ms_per_image']:8.2f} ms/img  channels-last "
                  f"{r['channels_last_ms_per_image']:8.2f} ms/img  ratio {r['ratio']:.2f}",
                  flush=True)
    batch_rows = batch_sizes(repeats)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "torch": torch.__version__, "load_average": os.getloadavg()},
        "repeats": repeats, "quick": args.quick, "rows": rows, "lite0_batch_sizes": batch_rows,
    }, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
