"""A small-scale reproduction of the training-loss table of Spratling & Schütt (arXiv 2501.12191).

    .venv/bin/python benchmarks/loss_table.py               # 5 losses x 3 seeds (~40 min, 1 CPU thread)
    .venv/bin/python benchmarks/loss_table.py --quick       # 1 seed, 2 epochs, small subsets

The published unknown-class rejection AUROCs on ImageNet-1k (ResNet-50 / Swin-T / ViT-B/16):
LogitNorm 85.53 / 78.09 / 64.3, HEM 85.09 / 81.77 / 67.12, CE 74.95 / 72.88 / 62.64, MM 60.5 /
56.75 / 54.16, Dice 51.34 / 43.83 / 38.17: the ordering LogitNorm ~ HEM > CE > MM > Dice.

Here, on real data that ships with the project (``../shared/data``), at a scale one CPU can
train 15 times in well under an hour:

* **ID**: CIFAR-10 classes 0-5 (airplane, automobile, bird, cat, deer, dog). Training: the first
  ``--train-per-class`` images of each class of ``cifar10-train``; test: the first
  ``--test-per-class`` of each class of ``cifar10-test``.
* **Near OOD / C-OOD pool**: the held-out classes 6-9 (frog, horse, ship, truck) of
  ``cifar10-test``, ``--test-per-class`` each. *near* = all of them; *C-OOD* = the C-OOD
  benchmark (Galil et al., ICLR 2023) on that pool with one class per severity level (4 levels,
  each class's images split 75/25 into severity estimation and test), reported as the mean
  AUROC over the levels.
* **Far OOD**: scikit-learn's 1,797 handwritten digits, upscaled to 32 px RGB.
* **Model**: the same 5-convolution CNN (conv-BatchNorm-ReLU, 16-16-32-32-64 channels, global
  average pooling, linear head) for every loss, trained from scratch by ``oodbench.train.train``
  with the same hyper-parameters for every loss (as the paper, which used CE's settings for all
  losses): SGD (momentum 0.9), lr ``--lr``, weight decay 5e-4, cosine schedule, ``--epochs``
  epochs, batch 128, no augmentation. Loss settings: CE plain, LogitNorm tau = 0.04, HEM margin
  1, MM margin 1 (torch's MultiMarginLoss), Dice (soft Dice over the batch).
* **Scores**: MSP and max-logit (``oodbench.detectors``), AUROC by ``oodbench.metrics``.

Each (loss, seed) trains once; seeds change the initialisation and the data order, not the data.
Nothing is tuned to match the paper. Prints mean +- sd over seeds per (loss, detector), the
ordering of the losses by each metric, and writes ``benchmarks/results/loss_table.json``
(``loss_table_quick.json``), rewritten after every run; an interrupted run continues where it
stopped (finished runs are read back from the JSON).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from oodbench import detectors, metrics, models
from oodbench.benchmarks.cood import CoodBenchmark
from oodbench.data.arrays import ArraySource
from oodbench.data.digits import DigitsSource
from oodbench.extract import extract
from oodbench.train import train

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ID, HELD_OUT = CLASSES[:6], CLASSES[6:]
LOSSES = {"ce": {}, "logitnorm": {"tau": 0.04}, "hem": {"margin": 1.0}, "mm": {"margin": 1.0},
          "dice": {}}
PUBLISHED_ORDER = ("logitnorm", "hem", "ce", "mm", "dice")
DETECTORS = ("msp", "maxlogit")
MEAN, STD = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])


def read_images(root: Path, classes: tuple[str, ...], per_class: int) -> tuple[np.ndarray, np.ndarray]:
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
    average pooling, linear head."""
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


def evaluate_model(model, id_test, pool, far) -> dict[str, Any]:
    opts = {"capture": ("logits", "features"), "progress": False, "device": "cpu"}
    id_acts, pool_acts, far_acts = (extract(model, s, **opts) for s in (id_test, pool, far))
    out: dict[str, Any] = {"id_accuracy": float(id_acts.correct.mean())}
    for name in DETECTORS:
        det = detectors.create(name)
        cood = CoodBenchmark(id_acts, pool_acts, window=1, n_levels=len(HELD_OUT), seed=0).run(None, [det])
        out[name] = {
            "cood_mean": float(cood["auroc"].mean()),
            "cood_levels": [float(v) for v in cood["auroc"]],
            "near": metrics.auroc(det.score(id_acts), det.score(pool_acts)),
            "far": metrics.auroc(det.score(id_acts), det.score(far_acts)),
        }
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for loss in LOSSES:
        mine = [r for r in runs if r["loss"] == loss]
        if not mine:
            continue
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in mine]}
        acc = [r["id_accuracy"] for r in mine]
        entry["id_accuracy"] = {"mean": float(np.mean(acc)), "sd": float(np.std(acc, ddof=1)) if len(acc) > 1 else None}
        for det in DETECTORS:
            entry[det] = {}
            for key in ("cood_mean", "near", "far"):
                vals = [r[det][key] for r in mine]
                entry[det][key] = {"mean": float(np.mean(vals)),
                                   "sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
                                   "values": vals}
        summary[loss] = entry
    orders: dict[str, Any] = {}
    for det in DETECTORS:
        for key in ("cood_mean", "near", "far"):
            ranked = sorted(summary, key=lambda k: -summary[k][det][key]["mean"])
            orders[f"{det}/{key}"] = {"order": ranked, "matches_published": ranked == [
                k for k in PUBLISHED_ORDER if k in summary]}
    return {"per_loss": summary, "orderings": orders}


def fmt(stat: dict[str, Any]) -> str:
    sd = stat["sd"]
    return f"{100 * stat['mean']:5.1f}" + (f" +-{100 * sd:4.1f}" if sd is not None else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--train-per-class", type=int, default=1000)
    parser.add_argument("--test-per-class", type=int, default=500)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.train_per_class, args.test_per_class = 1, 2, 200, 100
    if not (SHARED / "cifar10-train").is_dir():
        sys.exit(f"needs {SHARED}/cifar10-train and cifar10-test (see ../shared/data/README.md)")
    torch.set_num_threads(1)
    result_file = OUT / ("loss_table_quick.json" if args.quick else "loss_table.json")
    settings = {k: v for k, v in vars(args).items() if k != "quick"}
    previous = json.loads(result_file.read_text()) if result_file.is_file() else {}
    runs = previous.get("runs", []) if previous.get("settings") == settings else []
    t0 = time.perf_counter()
    train_x, train_y = read_images(SHARED / "cifar10-train", ID, args.train_per_class)
    test_x, test_y = read_images(SHARED / "cifar10-test", ID, args.test_per_class)
    pool_x, pool_y = read_images(SHARED / "cifar10-test", HELD_OUT, args.test_per_class)
    train_src = ArraySource(train_x, train_y, name="cifar6-train")
    id_test = ArraySource(test_x, test_y, name="cifar6-test")
    pool = ArraySource(pool_x, pool_y, name="cifar-held-out", class_names=list(HELD_OUT))
    far = DigitsSource(size=32)
    far_src = ArraySource(far.images, np.full(len(far), -1), name="digits32")
    print(f"data: {len(train_src)} train, {len(id_test)} ID test, {len(pool)} held-out, "
          f"{len(far_src)} digits ({time.perf_counter() - t0:.0f} s)", flush=True)
    for seed in range(args.seeds):
        for loss, options in LOSSES.items():
            if any(r["loss"] == loss and r["seed"] == seed for r in runs):
                continue
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                res = train(small_cnn(len(ID), seed), train_src, out=tmp, loss=loss,
                            loss_options=options, epochs=args.epochs, batch_size=128, lr=args.lr,
                            seed=seed, device="cpu", progress=False)
            record = {"loss": loss, "seed": seed, "train_seconds": time.perf_counter() - start,
                      "final_train_loss": res.history[-1]["loss"],
                      **evaluate_model(res.model, id_test, pool, far_src)}
            runs.append(record)
            print(f"{loss:9s} seed {seed}: acc {record['id_accuracy']:.3f}  MSP near "
                  f"{record['msp']['near']:.3f} far {record['msp']['far']:.3f} C-OOD "
                  f"{record['msp']['cood_mean']:.3f}  ({record['train_seconds']:.0f} s)", flush=True)
            OUT.mkdir(exist_ok=True)
            result_file.write_text(json.dumps({
                "settings": settings, "machine": platform.platform(), "torch": torch.__version__,
                "threads": torch.get_num_threads(), "runs": runs, **summarise(runs),
            }, indent=1))
    summary = summarise(runs)
    print("\nAUROC x 100, mean +- sd over seeds")
    print(f"{'loss':10s} {'detector':9s} {'ID acc':>12s} {'C-OOD':>12s} {'near':>12s} {'far':>12s}")
    for loss, entry in summary["per_loss"].items():
        for det in DETECTORS:
            print(f"{loss:10s} {det:9s} {fmt(entry['id_accuracy']):>12s} "
                  f"{fmt(entry[det]['cood_mean']):>12s} {fmt(entry[det]['near']):>12s} "
                  f"{fmt(entry[det]['far']):>12s}")
    print("\npublished order: " + " > ".join(PUBLISHED_ORDER))
    for key, value in summary["orderings"].items():
        print(f"{key:20s} {' > '.join(value['order'])}   matches: {value['matches_published']}")
    print(f"wrote {result_file}")


if __name__ == "__main__":
    main()
