"""UM, UMAP and DOE against plain cross-entropy fine-tuning, on CIFAR-10 at a CPU scale.

    .venv/bin/python studies/um_doe_study.py             # seeds 0, 1, 2 in one process
    .venv/bin/python studies/um_doe_study.py --seed 1    # one seed (run seeds side by side),
    .venv/bin/python studies/um_doe_study.py --merge     # then join the per-seed files
    .venv/bin/python studies/um_doe_study.py --quick     # 1 seed, tiny subsets (a smoke run)

The methods' papers (Zhu et al., ICML 2023, arXiv 2306.03715; Wang et al., ICLR 2023,
arXiv 2303.05033) start from a trained classifier and fine-tune it; so does this study, with
data that ships with the project (``../shared/data``):

* **ID**: CIFAR-10 classes airplane, automobile, bird, cat, deer, dog; training: the first
  ``--train-per-class`` images of each class of ``cifar10-train``; test: the first
  ``--test-per-class`` of each class of ``cifar10-test``.
* **Class-OOD**: the other four classes (frog, horse, ship, truck) of ``cifar10-test``.
* **Far-OOD**: the 1,300 shared ImageNet validation images, resized to 32 px, split at random
  (seed 0) into two disjoint halves: one is the far-OOD test set, the other DOE's outlier source
  (so DOE never sees a test OOD image).
* **Model**: a 6-convolution CNN (conv-BN-ReLU, 16-16-32-32-64-64 channels, max-pool after
  every second, global average pooling, linear head), trained from scratch with CE for
  ``--pretrain-epochs`` (SGD momentum 0.9, lr 0.05, cosine, weight decay 5e-4, batch 128, random
  crop + flip), then fine-tuned from that checkpoint for ``--epochs`` by each method with the
  same budget (epochs, batch, data order, schedule):

  - **CE**: cross-entropy, lr 0.01 (DOE's official fine-tuning lr);
  - **UM**: ``loss="um"``, L_hat estimated from random masks keeping 0.965, lr 0.01;
  - **UMAP**: ``loss="umap"``, masks keeping 0.8, weights frozen, lr 0.1 for the scores (the
    official UMAP config's lr);
  - **DOE**: ``loss="doe"``, warm-up ``epochs // 2`` epochs (the official 5 of 10), lr 0.01,
    ``--outlier-batch`` outlier images per step (64 per 128 ID images by default; the official
    256 per 128 is cut for CPU time).

* **Scores**: MSP, ODIN (T = 1000, eps = 0.0014, divided by the input std) and energy, from
  ``oodbench.detectors``; AUROC with DeLong 95 % intervals (logit scale,
  ``oodbench.metrics.delong.auroc_ci``) per seed, and paired DeLong tests of each method against
  CE on the same test images.

The committed JSON (3 seeds, the defaults) was made with the machine's load average between
10 and 26 on 2 cores; seeds 0 and 1 estimated UM's / UMAP's L_hat on augmented training images
(the code then; since, the model's eval transform), seed 2 on the eval transform.

Writes ``studies/results/um_doe_study.json`` (``um_doe_study_quick.json``) after every run,
with the machine's load average (the machine is shared: timings are not speed claims);
training runs are checkpointed under ``OODBENCH_CACHE/bench/um_doe_study`` and a restarted
study resumes them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision import transforms

from oodbench import detectors, models
from oodbench.config import cache_dir
from oodbench.data.arrays import ArraySource
from oodbench.extract import extract
from oodbench.metrics.delong import auroc_ci, delong_test
from oodbench.train import train
from oodbench.train.optim import FINETUNE, from_options

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
ID = ("airplane", "automobile", "bird", "cat", "deer", "dog")
CLASS_OOD = ("frog", "horse", "ship", "truck")
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
DETECTORS = {"msp": {}, "odin": {"temperature": 1000.0, "epsilon": 0.0014, "device": "cpu"},
             "energy": {}}
METHODS = ("ce", "um", "umap", "doe")
EVAL = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
AUGMENT = transforms.Compose([transforms.RandomCrop(32, padding=4),
                              transforms.RandomHorizontalFlip(), EVAL])


def cifar(root: Path, classes: tuple[str, ...], per_class: int, label: bool) -> ArraySource:
    images, labels = [], []
    for index, name in enumerate(classes):
        for file in sorted((root / name).glob("*.jpg"))[:per_class]:
            images.append(np.asarray(Image.open(file).convert("RGB")))
            labels.append(index if label else -1)
    return ArraySource(np.stack(images), labels, name=f"{root.name}:{'+'.join(classes)}:{per_class}")


def imagenet_halves() -> tuple[ArraySource, ArraySource]:
    """The shared ImageNet images at 32 px, split in two disjoint random halves."""
    files = sorted(p for p in (SHARED / "imagenet-val-1300" / "images").iterdir()
                   if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    images = np.stack([np.asarray(Image.open(f).convert("RGB").resize((32, 32), Image.BILINEAR))
                       for f in files])
    order = np.random.default_rng(0).permutation(len(images))
    half = len(images) // 2
    test, outliers = order[:half], order[half:]
    return (ArraySource(images[test], np.full(len(test), -1), name="imagenet32-test"),
            ArraySource(images[outliers], np.full(len(outliers), -1), name="imagenet32-outliers"))


def cnn(seed: int) -> models.Classifier:
    """conv-BN-ReLU x 6 (16-16-32-32-64-64, max-pool after every second), GAP, linear head."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (c_in, c_out) in enumerate(zip((3, 16, 16, 32, 32, 64), (16, 16, 32, 32, 64, 64))):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]
            layers += [nn.MaxPool2d(2)] if i in (1, 3) else []
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, len(ID)))
    return models.wrap(net, feature_layer=str(len(layers) - 1), head_layer=str(len(net) - 1),
                       transform=EVAL, spec=f"um_doe_cnn(seed={seed})")


def method_settings(method: str, epochs: int, outlier_batch: int, outliers: ArraySource) -> dict[str, Any]:
    return {"ce": {"loss": "ce", "lr": 0.01},
            "um": {"loss": "um", "lr": 0.01},
            "umap": {"loss": "umap", "lr": 0.1},
            "doe": {"loss": "doe", "lr": 0.01, "loss_options": {"warmup": epochs // 2},
                    "outliers": outliers, "outlier_batch_size": outlier_batch}}[method]


def evaluate(model: models.Classifier, sets: dict[str, ArraySource]) -> tuple[dict[str, Any], dict[str, Any]]:
    acts = {k: extract(model, s, capture=("logits",), cache=False, progress=False, device="cpu")
            for k, s in sets.items()}
    out: dict[str, Any] = {"id_accuracy": float(acts["id"].correct.mean())}
    scores: dict[str, dict[str, list[float]]] = {}
    for name, options in DETECTORS.items():
        det = detectors.create(name, **options).fit(None, model=model)  # none fits on ID data
        scores[name] = {k: det.score(a).tolist() for k, a in acts.items()}
        out[name] = {}
        for group in ("class_ood", "far_ood"):
            ci = auroc_ci(scores[name]["id"], scores[name][group])
            out[name][group] = {"auroc": ci.estimate, "low": ci.low, "high": ci.high}
    return out, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None, help="run only this seed (own file)")
    parser.add_argument("--merge", action="store_true", help="join um_doe_study*.json")
    parser.add_argument("--pretrain-epochs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-per-class", type=int, default=300)
    parser.add_argument("--test-per-class", type=int, default=150)
    parser.add_argument("--outlier-batch", type=int, default=64)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.pretrain_epochs, args.epochs, args.train_per_class, args.test_per_class = 1, 1, 2, 40, 20
    if not (SHARED / "cifar10-train").is_dir():
        raise SystemExit(f"needs {SHARED}/cifar10-train, cifar10-test, imagenet-val-1300")
    torch.set_num_threads(1)
    settings = {k: v for k, v in vars(args).items() if k not in ("quick", "seed", "merge")}
    result_file = OUT / ("um_doe_study_quick.json" if args.quick else "um_doe_study.json")
    if args.merge:
        merge(result_file, settings)
        return
    if args.seed is not None:
        result_file = OUT / f"um_doe_study.seed{args.seed}.json"
    previous = json.loads(result_file.read_text()) if result_file.is_file() else {}
    runs: list[dict[str, Any]] = previous.get("runs", []) if previous.get("settings") == settings else []
    runs_dir = cache_dir() / "bench" / ("um_doe_study_quick" if args.quick else "um_doe_study")
    train_src = cifar(SHARED / "cifar10-train", ID, args.train_per_class, True)
    far, outliers = imagenet_halves()
    sets = {"id": cifar(SHARED / "cifar10-test", ID, args.test_per_class, True),
            "class_ood": cifar(SHARED / "cifar10-test", CLASS_OOD, args.test_per_class, False),
            "far_ood": far}
    common = {"batch_size": 128, "weight_decay": 5e-4, "device": "cpu", "progress": False,
              "transform": AUGMENT, "num_workers": 0}
    for seed in range(args.seeds) if args.seed is None else [args.seed]:
        start = time.perf_counter()
        optim, rest = from_options({**common, "lr": 0.05, "epochs": args.pretrain_epochs},
                                   FINETUNE)
        base = train(cnn(seed), train_src, out=runs_dir / f"pretrain-{seed}", loss="ce",
                     optim=optim, seed=seed, **rest)
        pretrain_seconds = time.perf_counter() - start
        seed_scores: dict[str, Any] = {}
        for method in METHODS:
            done = [r for r in runs if r["seed"] == seed and r["method"] == method]
            start = time.perf_counter()
            model = cnn(seed)
            model.load_state_dict(base.model.state_dict())
            optim, rest = from_options({**common, "epochs": args.epochs, **method_settings(
                method, args.epochs, args.outlier_batch, outliers)}, FINETUNE)
            res = train(model, train_src, out=runs_dir / f"{method}-{seed}", optim=optim,
                        seed=seed, **rest)
            result, seed_scores[method] = evaluate(res.model, sets)
            record = {"method": method, "seed": seed, "seconds": time.perf_counter() - start,
                      "pretrain_seconds": pretrain_seconds, "history": res.history,
                      "loss_options": res.config["loss_options"], **result}
            if method != "ce":
                record["vs_ce"] = {det: {g: vars(delong_test(
                    seed_scores[method][det]["id"], seed_scores[method][det][g],
                    seed_scores["ce"][det]["id"], seed_scores["ce"][det][g]))
                    for g in ("class_ood", "far_ood")} for det in DETECTORS}
            runs = [r for r in runs if r not in done] + [record]
            print(f"seed {seed} {method:5s} acc {result['id_accuracy']:.3f}  " + "  ".join(
                f"{d} {result[d]['class_ood']['auroc']:.3f}/{result[d]['far_ood']['auroc']:.3f}"
                for d in DETECTORS) + f"  ({record['seconds']:.0f} s)", flush=True)
            OUT.mkdir(exist_ok=True)
            result_file.write_text(json.dumps({
                "settings": settings, "machine": platform.platform(), "torch": torch.__version__,
                "threads": torch.get_num_threads(), "loadavg": os.getloadavg(),
                "sizes": {k: len(s) for k, s in {**sets, "train": train_src, "outliers": outliers}.items()},
                "runs": runs, "summary": summarise(runs)}, indent=1, default=float))
    print_summary(summarise(runs))


def merge(result_file: Path, settings: dict[str, Any]) -> None:
    """Join the runs of ``result_file`` and the per-seed files of the same settings."""
    parts = [result_file, *sorted(OUT.glob("um_doe_study.seed*.json"))]
    runs, loads, base = [], [], None
    for part in parts:
        if not part.is_file():
            continue
        data = json.loads(part.read_text())
        if data["settings"] != settings:
            raise SystemExit(f"{part} was made with other settings: {data['settings']}")
        base = base or data
        loads.append(data["loadavg"])
        runs += [r for r in data["runs"] if (r["seed"], r["method"]) not in
                 {(q["seed"], q["method"]) for q in runs}]
    if base is None:
        raise SystemExit("nothing to merge")
    runs.sort(key=lambda r: (r["seed"], METHODS.index(r["method"])))
    result_file.write_text(json.dumps({**base, "loadavg": loads, "merged_from": [p.name for p in parts if p.is_file()],
                                       "runs": runs, "summary": summarise(runs)}, indent=1, default=float))
    print_summary(summarise(runs))


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method in METHODS:
        mine = [r for r in runs if r["method"] == method]
        if not mine:
            continue
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in mine],
                                 "id_accuracy": float(np.mean([r["id_accuracy"] for r in mine]))}
        for det in DETECTORS:
            for group in ("class_ood", "far_ood"):
                values = [r[det][group]["auroc"] for r in mine]
                cell: dict[str, Any] = {"mean": float(np.mean(values)),
                                        "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None}
                if method != "ce":
                    diffs = [r["vs_ce"][det][group]["difference"] for r in mine]
                    cell["minus_ce"] = float(np.mean(diffs))
                    cell["seeds_better_significant"] = sum(
                        r["vs_ce"][det][group]["difference"] > 0 and r["vs_ce"][det][group]["p_value"] < 0.05 for r in mine)
                    cell["seeds_worse_significant"] = sum(
                        r["vs_ce"][det][group]["difference"] < 0 and r["vs_ce"][det][group]["p_value"] < 0.05 for r in mine)
                entry[f"{det}/{group}"] = cell
        out[method] = entry
    return out


def print_summary(summary: dict[str, Any]) -> None:
    print(f"\n{'method':6s} {'acc':>5s}  " + "  ".join(f"{d + '/' + g[:5]:>22s}" for d in DETECTORS for g in ("class_ood", "far_ood")))
    for method, entry in summary.items():
        cells = []
        for d in DETECTORS:
            for g in ("class_ood", "far_ood"):
                c = entry[f"{d}/{g}"]
                extra = f" {100 * c['minus_ce']:+5.1f}" if "minus_ce" in c else "      "
                cells.append(f"{100 * c['mean']:5.1f}" + (f"+-{100 * c['sd']:3.1f}" if c["sd"] is not None else "      ") + extra)
        print(f"{method:6s} {100 * entry['id_accuracy']:5.1f}  " + "  ".join(f"{c:>22s}" for c in cells))


if __name__ == "__main__":
    main()
