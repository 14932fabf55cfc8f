"""Training throughput: ``oodbench.train.train`` against a bare PyTorch loop, and the
frozen-feature fast path (``train_head``) against a forward pass per epoch.

    python speed/bench_train.py            # ~3 min on one CPU thread
    python speed/bench_train.py --quick

Data: ``--images`` real CIFAR-10 test images (``../shared/data/cifar10-test``; random 32 px
images when it is absent), 6 classes, in memory (``ArraySource``). Model: the 5-convolution CNN
the loss table first trained (``small_cnn``: conv-BN-ReLU, ~0.1M parameters), CPU, one torch
thread.

1. **Overhead of oodbench.train.** *bare*: the loop a user writes (``torch.utils.data.DataLoader``
   with ``shuffle=True`` over ``source.load`` + the model's transform, ``model(x)``,
   cross-entropy, SGD with momentum, ``backward``, ``step``, cosine ``LambdaLR``); *train*:
   ``train(model, source, loss="ce", epochs=E, ...)`` with the same batch size and optimiser,
   including what it adds (seeded order, the failure-tolerant loader, the loss's label check,
   loss bookkeeping, a safetensors checkpoint + JSON per epoch). Runs alternate in ABBA order
   after a warm-up run; images/s per run, overhead = 1 - train/bare of the medians (and of the
   best runs, less sensitive to other jobs on a shared machine).
2. **Head only, E epochs.** *full forward*: ``train(..., trainable="head")`` (the frozen body runs
   every epoch); *feature cache*: one ``extract`` of the features (into an empty cache) plus
   ``train_head`` on them for the same epochs (same batch size, lr, optimiser).

Prints a table and writes ``speed/results/bench_train.json`` (``bench_train_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from oodbench import models
from oodbench.data.arrays import ArraySource
from oodbench.extract import extract
from oodbench.train import train, train_head
from oodbench.train.optim import OptimSettings

OUT = Path(__file__).resolve().parent / "results"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
#: the loss study's 6 ID classes of CIFAR-10
ID = ("airplane", "automobile", "bird", "cat", "deer", "dog")
#: CIFAR-10's per-channel mean and standard deviation
MEAN, STD = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])
BATCH = 128


def read_images(root: Path, classes: tuple[str, ...], per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``per_class`` JPEGs of each class folder, as uint8 HWC arrays and labels."""
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted((root / name).glob("*.jpg"))[:per_class]
        images += [np.asarray(Image.open(f).convert("RGB")) for f in files]
        labels += [label] * len(files)
    return np.stack(images), np.asarray(labels)


def to_tensor(image: Image.Image) -> torch.Tensor:
    x = (np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x.astype(np.float32)).permute(2, 0, 1)


def small_cnn(num_classes: int, seed: int) -> models.Classifier:
    """conv-BN-ReLU x5 (16-16-32-32-64 channels, max-pool after the 2nd and 4th), global
    average pooling, linear head: the loss table's first network (before the small-image
    recipe), kept here so that this benchmark measures what its recorded runs measured."""
    layers: list[nn.Module] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i, (c_in, c_out) in enumerate([(3, 16), (16, 16), (16, 32), (32, 32), (32, 64)]):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                       nn.ReLU()]
            if i in (1, 3):
                layers.append(nn.MaxPool2d(2))
        feature_layer = str(len(layers) - 1)
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)]
    return models.wrap(nn.Sequential(*layers), feature_layer=feature_layer,
                       head_layer=str(len(layers) - 1), transform=to_tensor,
                       spec=f"loss_table_cnn(seed={seed})")


class Plain(Dataset):
    def __init__(self, source, transform):
        self.source, self.transform, self.labels = source, transform, source.labels

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int):
        return self.transform(self.source.load(i)), int(self.labels[i])


def bare_loop(source, epochs: int, seed: int) -> float:
    """images/s of the plain PyTorch loop (see the module docstring)."""
    model = small_cnn(len(ID), seed)
    model.train()
    settings = OptimSettings(epochs=epochs, batch_size=BATCH, lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    loader = DataLoader(Plain(source, model.transform), batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    sched = settings.make_scheduler(opt, len(loader))
    start = time.perf_counter()
    for _ in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return epochs * len(source) / (time.perf_counter() - start)


def oodbench_train(source, epochs: int, seed: int, **options) -> tuple[float, float]:
    """(images/s, seconds) of oodbench.train.train."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train(small_cnn(len(ID), seed), source, out=tmp,
              optim=OptimSettings(epochs=epochs, batch_size=BATCH, lr=0.1), seed=seed,
              device="cpu", progress=False, **options)
        seconds = time.perf_counter() - start
    return epochs * len(source) / seconds, seconds


def feature_cache_path(source, epochs: int, seed: int) -> tuple[float, float]:
    """(seconds of the one extraction, seconds of train_head) for the head-only fast path."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["OODBENCH_CACHE"] = cache
        start = time.perf_counter()
        acts = extract(small_cnn(len(ID), seed), source, capture=("logits", "features"),
                       progress=False, device="cpu")
        extracted = time.perf_counter()
        train_head(acts, optim=OptimSettings(epochs=epochs, batch_size=BATCH, lr=0.1), seed=seed,
                   device="cpu")
        return extracted - start, time.perf_counter() - extracted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--head-epochs", type=int, default=10)
    args = parser.parse_args()
    if args.quick:
        args.images, args.repeats, args.head_epochs = 600, 2, 3
    torch.set_num_threads(1)
    per_class = args.images // len(ID)
    if (SHARED / "cifar10-test").is_dir():
        x, y = read_images(SHARED / "cifar10-test", ID, per_class)
        data = "cifar10-test"
    else:
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, size=(per_class * len(ID), 32, 32, 3), dtype=np.uint8)
        y, data = np.arange(len(x)) % len(ID), "random"
    source = ArraySource(x, y, name="bench")
    bare_loop(source, 1, 0)  # first-use costs (imports, allocator) outside the timings
    bare, ours = [], []
    for r in range(args.repeats):  # ABBA order: a drift in machine load hits both alike
        for which in (("bare", "train") if r % 2 == 0 else ("train", "bare")):
            if which == "bare":
                bare.append(bare_loop(source, args.epochs, r))
            else:
                ours.append(oodbench_train(source, args.epochs, r)[0])
        print(f"repeat {r}: bare {bare[-1]:,.0f} img/s, oodbench.train {ours[-1]:,.0f} img/s", flush=True)
    overhead = 1 - statistics.median(ours) / statistics.median(bare)
    overhead_best = 1 - max(ours) / max(bare)
    full_speed, full_s = oodbench_train(source, args.head_epochs, 0, trainable="head")
    extract_s, head_s = feature_cache_path(source, args.head_epochs, 0)
    result = {
        "settings": vars(args), "data": data, "n_images": len(source), "batch_size": BATCH,
        "machine": platform.platform(), "torch": torch.__version__, "threads": 1,
        "load_average": os.getloadavg(),
        "train_vs_bare": {"bare_images_per_s": bare, "train_images_per_s": ours,
                          "bare_median": statistics.median(bare),
                          "train_median": statistics.median(ours), "overhead": overhead,
                          "overhead_best_of": overhead_best},
        "head_only": {"epochs": args.head_epochs, "full_forward_seconds": full_s,
                      "feature_cache_extract_seconds": extract_s,
                      "feature_cache_train_head_seconds": head_s,
                      "speedup": full_s / (extract_s + head_s)},
    }
    print(f"\n{'':34s} {'median img/s':>14s}")
    print(f"{'bare PyTorch loop':34s} {result['train_vs_bare']['bare_median']:>14,.0f}")
    print(f"{'oodbench.train.train':34s} {result['train_vs_bare']['train_median']:>14,.0f}")
    print(f"overhead of oodbench.train: {100 * overhead:+.1f} % of the medians, "
          f"{100 * overhead_best:+.1f} % of the best runs  (positive = slower)")
    print(f"\nhead only, {args.head_epochs} epochs on {len(source)} images:")
    print(f"  full forward per epoch (train, trainable='head'): {full_s:8.1f} s")
    print(f"  feature cache (extract once + train_head):        {extract_s + head_s:8.1f} s "
          f"({extract_s:.1f} s extract + {head_s:.1f} s train_head)")
    print(f"  speedup: {result['head_only']['speedup']:.1f}x")
    OUT.mkdir(exist_ok=True)
    path = OUT / ("bench_train_quick.json" if args.quick else "bench_train.json")
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
