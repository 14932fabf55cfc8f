"""Images/s of the small-image recipe against a bare PyTorch loop on the same network.

    .venv/bin/python speed/bench_recipe.py               # cpu-small, 1 thread
    .venv/bin/python speed/bench_recipe.py --recipe gpu-resnet18 --device cuda

Both train the recipe's network on the same real CIFAR-10 images held in memory:

* **recipe**: ``oodbench.train.recipe.train_recipe`` for one epoch over ``--images`` images
  (tensor crop + flip + normalisation per batch, the loss from the registry, warm-up + cosine
  schedule per step, running loss and accuracy; no checkpoint), its images/s from its history;
* **bare loop**: ``for batch: loss = F.cross_entropy(model(x), y); zero_grad; backward; step``
  on images normalised once beforehand (no augmentation, no schedule, nothing else), with the
  same SGD settings, batch size, channels-last and autocast.

The two alternate for ``--rounds`` rounds, each on a freshly initialised network, so a change
in the machine's load hits both alike; the table gives the median images/s of each and the
recipe's overhead ``1 - recipe / bare``, in wall-clock time and in this process's CPU time
(``time.process_time``: on a shared machine the wall clock also counts the time the scheduler
gave to other processes; CPU time does not). Writes ``speed/results/bench_recipe.json`` (or
``bench_recipe_<recipe>.json``) with ``os.getloadavg()`` before and after: on a shared machine
the figures are only comparable with each other, not with another run's.
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
import torch.nn.functional as F

from oodbench.data.folder import ImageFolder
from oodbench.extract.runtime import autocast, resolve_amp, resolve_device
from oodbench.train.recipe import RECIPES, Recipe, train_recipe
from oodbench.train.tensor_images import TensorImages, normalise, tensor_images

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
ID = ("airplane", "automobile", "bird", "cat", "deer", "dog")


def bare_loop(recipe: Recipe, data: TensorImages, device: torch.device, seed: int
              ) -> tuple[float, float]:
    """(wall-clock, CPU-time) images/s of the plainest loop on the recipe's network and
    optimiser settings."""
    model = recipe.build(len(data.class_names), seed).to(device).train()
    if recipe.channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-arg]
    amp_dtype = resolve_amp(recipe.amp, device)
    x_all = normalise(data.images.to(device), recipe.mean, recipe.std,
                      channels_last=recipe.channels_last)
    y_all = data.labels.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=0.9,
                          weight_decay=recipe.weight_decay)
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed)).to(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(0, len(order), recipe.batch_size):
        rows = order[i : i + recipe.batch_size]
        with autocast(device, amp_dtype):
            logits = model(x_all[rows])
        loss = F.cross_entropy(logits.float(), y_all[rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (len(order) / (time.perf_counter() - start),
            len(order) / (time.process_time() - cpu_start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu-small", choices=sorted(RECIPES))
    parser.add_argument("--images", type=int, default=768, help="images per round and arm")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-root", type=Path, default=SHARED, help="holds cifar10-train")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: see doc)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = True
    device = resolve_device(args.device)
    recipe = RECIPES[args.recipe].scaled(epochs=1, warmup_fraction=0.0)
    per_class = -(-args.images // len(ID))
    data = tensor_images(ImageFolder(args.data_root / "cifar10-train"), per_class=per_class).split(ID)[0]
    load_before = os.getloadavg()
    bare_loop(recipe, data, device, seed=99)  # warm-up: first-call allocations, kernels
    rows = []
    for r in range(args.rounds):
        cpu_start = time.process_time()
        result = train_recipe(recipe, data, loss="ce", seed=r, device=device)
        recipe_cpu = len(data) / (time.process_time() - cpu_start)  # the whole call
        bare_wall, bare_cpu = bare_loop(recipe, data, device, seed=r)
        rows.append({"round": r, "recipe": result.history[0]["images_per_s"], "bare": bare_wall,
                     "recipe_cpu": recipe_cpu, "bare_cpu": bare_cpu})
        print(f"round {r}: recipe {rows[-1]['recipe']:8.1f} images/s ({recipe_cpu:7.1f} per "
              f"CPU-s)   bare loop {bare_wall:8.1f} images/s ({bare_cpu:7.1f} per CPU-s)",
              flush=True)
    med = {k: float(np.median([r[k] for r in rows])) for k in ("recipe", "bare", "recipe_cpu",
                                                                "bare_cpu")}
    overhead = 1.0 - med["recipe"] / med["bare"]
    overhead_cpu = 1.0 - med["recipe_cpu"] / med["bare_cpu"]
    print(f"\nmedian: recipe {med['recipe']:.1f} images/s, bare loop {med['bare']:.1f} images/s, "
          f"overhead {100 * overhead:+.1f} % wall-clock, {100 * overhead_cpu:+.1f} % in CPU time "
          f"(load average {os.getloadavg()[0]:.1f})")
    name = "bench_recipe" if args.recipe == "cpu-small" else f"bench_recipe_{args.recipe}"
    out = args.out or OUT / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "recipe": args.recipe, "recipe_fields": recipe.as_dict(), "images": len(data),
        "device": str(device), "threads": torch.get_num_threads(), "machine": platform.platform(),
        "torch": torch.__version__, "load_average_before": load_before,
        "load_average_after": os.getloadavg(), "rounds": rows,
        "median_images_per_s": {"recipe": med["recipe"], "bare": med["bare"]},
        "median_images_per_cpu_second": {"recipe": med["recipe_cpu"], "bare": med["bare_cpu"]},
        "overhead": overhead, "overhead_cpu_time": overhead_cpu,
        "note": "shared machine: the two arms alternate, so load changes hit both alike; the "
                "CPU-time figures (time.process_time of this process, the recipe's whole "
                "train_recipe call) do not count time the scheduler gave to other processes",
    }, indent=1))


if __name__ == "__main__":
    main()
