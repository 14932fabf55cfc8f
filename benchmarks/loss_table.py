"""A small-scale reproduction of the training-loss table of Spratling & Schütt (arXiv 2501.12191).

    .venv/bin/python benchmarks/loss_table.py                       # the CPU study (5 x 3 runs)
    .venv/bin/python benchmarks/loss_table.py --quick               # 1 seed, tiny subsets
    .venv/bin/python benchmarks/loss_table.py --recipe gpu-resnet18 --device cuda   # full scale

The published unknown-class rejection AUROCs on ImageNet-1k (ResNet-50 / Swin-T / ViT-B/16,
``../shared/data/leaderboards/imagenet1k_ood_losses.csv``): LogitNorm 85.53 / 78.09 / 64.3,
HEM 81.77 / 85.09 / 67.12, CE 72.88 / 74.95 / 62.64, MM 60.5 / 54.16 / 56.75, Dice 43.83 /
51.34 / 38.17: the ordering LogitNorm ~ HEM > CE > MM > Dice.

Here, on real data that ships with the project (``../shared/data``):

* **ID**: CIFAR-10 classes 0-5 (airplane, automobile, bird, cat, deer, dog): training images
  the first ``--train-per-class`` of each class of ``cifar10-train``, test images the first
  ``--test-per-class`` of each class of ``cifar10-test``. The CPU study (recipe ``cpu-small``)
  uses 1,000 and 200 per class: what one niced process on a 2-core machine shared by eight
  developers trains 15 times in under an hour (14-46 training images/s per niced worker were
  measured there under load averages of 15-21); every other recipe defaults to all images.
* **Near (class-OOD)**: the held-out classes 6-9 (frog, horse, ship, truck) of ``cifar10-test``.
* **Far**: the 1,300 ImageNet validation images of ``imagenet-val-1300`` down-sampled to 32 px.
* **Training**: the small-image recipe ``oodbench.train.recipe`` (``--recipe``; a CIFAR ResNet,
  images in memory, crop + flip on tensors, channels-last, SGD momentum 0.9, weight decay 5e-4,
  linear warm-up then cosine to 0), identical for every loss, as in the paper, which trained
  every loss with CE's settings. Loss settings, each its paper's: CE plain; LogitNorm
  tau = 0.04 (Wei et al., ICML 2022, their CIFAR-10 value); HEM margin 1 (Spratling & Schütt,
  their value for balanced data); MM margin 1 (torch's MultiMarginLoss, HEM's reference code);
  Dice without options (soft Dice over the batch).
* **Detectors**: MSP, max-logit and energy (``oodbench.detectors``); AUROC with DeLong's 95 %
  interval (``oodbench.metrics.delong.auroc_ci``); each loss against CE by DeLong's paired test
  on the same test images, per seed.

Each (loss, seed) is cached by content (recipe, data fingerprint, loss, options, seed) under
``$OODBENCH_CACHE/loss_table/<key>/``: the per-epoch checkpoints (a killed run resumes from its
last epoch) and, once evaluated, the logits and the record, so an interrupted study continues
where it stopped. Nothing is tuned to match the paper. Writes
``benchmarks/results/loss_table.json`` (``loss_table_quick.json``, ``loss_table_<recipe>.json``
for another recipe) after every run, with the machine's load average, this process's wall time
and when the first and the last run finished (runs read back from the cache keep the time they
were written, so a study resumed or split over workers keeps its wall clock).
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import detectors
from oodbench.config import cache_dir
from oodbench.data.folder import ImageFolder
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.extract.activations import Activations
from oodbench.metrics.delong import auroc_ci, delong_test
from oodbench.train.recipe import RECIPES, Recipe, predict_logits, run_key, train_recipe
from oodbench.train.tensor_images import TensorImages, tensor_images

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
ID = ("airplane", "automobile", "bird", "cat", "deer", "dog")
LOSSES: dict[str, dict[str, Any]] = {"ce": {}, "logitnorm": {"tau": 0.04},
                                     "hem": {"margin": 1.0}, "mm": {"margin": 1.0}, "dice": {}}
DETECTORS = ("msp", "maxlogit", "energy")
#: the published comparisons with CE: +1 = the loss is better than CE, -1 = worse
PUBLISHED = {"logitnorm": +1, "hem": +1, "mm": -1, "dice": -1}
SETS = ("id", "near", "far")
#: the CPU study's image counts per class (sized to the machine; see the module doc)
CPU_TRAIN_PER_CLASS, CPU_TEST_PER_CLASS = 1000, 200


def load_data(root: Path, train_per_class: int | None, test_per_class: int | None
              ) -> dict[str, TensorImages]:
    """The four image sets; ``root`` holds ``cifar10-train``, ``cifar10-test`` and either
    ``imagenet-val-1300`` or its 32 px copy ``imagenet-val-1300-32px/<any>/*.png`` (what
    ``benchmarks/gpu_loss_table.sh`` packs for a device machine; the same pixels)."""
    train = tensor_images(ImageFolder(root / "cifar10-train"), per_class=train_per_class,
                          name="cifar10-train")
    test = tensor_images(ImageFolder(root / "cifar10-test"), per_class=test_per_class,
                         name="cifar10-test")
    id_test, near = test.split(ID)
    packed = root / "imagenet-val-1300-32px"
    far_source = ImageFolder(packed) if packed.is_dir() else ImageNetVal(root / "imagenet-val-1300")
    far = tensor_images(far_source, size=32, name="imagenet-val-1300@32px")
    far = TensorImages(far.images, torch.full((len(far),), -1), (), far.name)
    return {"train": train.select(ID, "cifar10-train[id]"), "id": id_test, "near": near,
            "far": far}


def scores(logits: np.ndarray, name: str) -> np.ndarray:
    n = len(logits)
    acts = Activations(logits=logits, labels=np.full(n, -1), ids=np.arange(n).astype(str))
    return detectors.create(name).score(acts)


def evaluate(logits: dict[str, np.ndarray], id_labels: np.ndarray) -> dict[str, Any]:
    record: dict[str, Any] = {"id_accuracy": float((logits["id"].argmax(1) == id_labels).mean()),
                              "mean_logit_norm": float(np.linalg.norm(logits["id"], axis=1).mean())}
    for det in DETECTORS:
        s = {k: scores(logits[k], det) for k in SETS}
        record[det] = {}
        for ood in ("near", "far"):
            ci = auroc_ci(s["id"], s[ood])
            record[det][ood], record[det][f"{ood}_ci"] = ci.estimate, [ci.low, ci.high]
    return record


def one_run(recipe_name: str, data: dict[str, TensorImages], loss: str, seed: int, device: str,
            epochs: int | None) -> dict[str, Any]:
    """Train and evaluate one (loss, seed), or read it back from its cache folder."""
    recipe = RECIPES[recipe_name] if epochs is None else RECIPES[recipe_name].scaled(epochs=epochs)
    key = run_key(recipe, data["train"], loss, LOSSES[loss], seed)
    folder = cache_dir() / "loss_table" / key
    record_file, logits_file = folder / "record.json", folder / "logits.npz"
    if record_file.is_file() and logits_file.is_file():
        return _read_record(record_file)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker on this run: wait, then read it back
        if record_file.is_file() and logits_file.is_file():
            return _read_record(record_file)
        _train_and_evaluate(recipe, data, loss, seed, device, key, folder)
        return _read_record(record_file)


def _read_record(file: Path) -> dict[str, Any]:
    """A finished run's record, with the time it was written (a study's wall clock)."""
    finished = datetime.datetime.fromtimestamp(file.stat().st_mtime, datetime.timezone.utc)
    return {**json.loads(file.read_text()), "finished_at": finished.isoformat(timespec="seconds")}


def _train_and_evaluate(recipe: Recipe, data: dict[str, TensorImages], loss: str, seed: int,
                        device: str, key: str, folder: Path) -> None:
    record_file, logits_file = folder / "record.json", folder / "logits.npz"
    result = train_recipe(recipe, data["train"], loss=loss, loss_options=LOSSES[loss], seed=seed,
                          device=device, out=folder / "checkpoint",
                          log=lambda line: print(line, flush=True))
    logits = {k: predict_logits(result.model, data[k], recipe, device) for k in SETS}
    record = {"loss": loss, "seed": seed, "key": key, "loss_options": LOSSES[loss],
              "train_seconds": result.train_seconds,
              "images_per_s": float(np.mean([h["images_per_s"] for h in result.history])),
              "final_train_loss": result.history[-1]["loss"],
              "final_train_accuracy": result.history[-1]["train_accuracy"],
              **evaluate(logits, data["id"].labels.numpy())}
    np.savez(logits_file, **logits)
    record_file.write_text(json.dumps(record, indent=1))


def _stat(values: list[float]) -> dict[str, Any]:
    return {"mean": float(np.mean(values)),
            "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None, "values": values}


def compare_with_ce(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per loss and detector: paired DeLong test of AUROC(loss) - AUROC(CE) on each seed."""
    by = {(r["loss"], r["seed"]): r for r in runs}
    out: dict[str, Any] = {}
    for loss, sign in PUBLISHED.items():
        seeds = sorted(s for (name, s) in by if name == loss and ("ce", s) in by)
        if not seeds:
            continue
        out[loss] = {}
        for det in DETECTORS:
            for ood in ("near", "far"):
                tests = []
                for s in seeds:
                    a, b = (np.load(cache_dir() / "loss_table" / by[(k, s)]["key"] / "logits.npz")
                            for k in (loss, "ce"))
                    t = delong_test(scores(a["id"], det), scores(a[ood], det),
                                    scores(b["id"], det), scores(b[ood], det), paired=True)
                    tests.append({"seed": s, "difference": t.difference, "ci": [t.low, t.high],
                                  "p": t.p_value})
                agree = [t["ci"][0] > 0 if sign > 0 else t["ci"][1] < 0 for t in tests]
                oppose = [t["ci"][1] < 0 if sign > 0 else t["ci"][0] > 0 for t in tests]
                verdict = ("holds" if all(agree) and len(tests) >= 3 else
                           "does not hold" if all(oppose) and len(tests) >= 3 else
                           "not resolved at this scale")
                out[loss][f"{det}/{ood}"] = {
                    "published": "better than CE" if sign > 0 else "worse than CE",
                    "mean_difference": float(np.mean([t["difference"] for t in tests])),
                    "per_seed": tests, "verdict": verdict}
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for loss in LOSSES:
        mine = sorted((r for r in runs if r["loss"] == loss), key=lambda r: r["seed"])
        if not mine:
            continue
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in mine],
                                 "id_accuracy": _stat([r["id_accuracy"] for r in mine])}
        for det in DETECTORS:
            entry[det] = {ood: {**_stat([r[det][ood] for r in mine]),
                                "intervals": [r[det][f"{ood}_ci"] for r in mine]}
                          for ood in ("near", "far")}
        summary[loss] = entry
    return summary


def fmt(stat: dict[str, Any]) -> str:
    sd = stat["sd"]
    return f"{100 * stat['mean']:5.1f}" + (f" +-{100 * sd:4.1f}" if sd is not None else "      ")


def print_table(summary: dict[str, Any], comparisons: dict[str, Any]) -> None:
    print("\nAUROC x 100, mean +- sd over seeds; [lowest, highest] DeLong 95 % bound over seeds")
    print(f"{'loss':10s} {'ID acc':>12s} {'detector':9s} {'near':>12s} {'interval':>13s} "
          f"{'far':>12s} {'interval':>13s}")
    for loss, entry in summary.items():
        for i, det in enumerate(DETECTORS):
            cells = []
            for ood in ("near", "far"):
                lows, highs = zip(*entry[det][ood]["intervals"])
                cells.append(f"{fmt(entry[det][ood]):>12s} [{100 * min(lows):4.1f},{100 * max(highs):5.1f}]")
            acc = fmt(entry["id_accuracy"]) if i == 0 else ""
            print(f"{loss if i == 0 else '':10s} {acc:>12s} {det:9s} {' '.join(cells)}")
    print("\npublished comparison with CE (MSP, held-out classes), paired DeLong per seed:")
    for loss, entry in comparisons.items():
        c = entry["msp/near"]
        print(f"  {loss:9s} {c['published']:15s} mean difference {100 * c['mean_difference']:+5.1f}"
              f"  -> {c['verdict']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 1 epoch, small subsets")
    parser.add_argument("--recipe", default="cpu-small", choices=sorted(RECIPES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed-list", default=None,
                        help="seeds in this order, e.g. 2,1 (a second worker process on the same "
                             "cache; default 0 .. seeds-1)")
    parser.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs")
    parser.add_argument("--train-per-class", type=int, default=None,
                        help="default: all 5,000 (the CPU study: 1,000)")
    parser.add_argument("--test-per-class", type=int, default=None,
                        help="default: all 1,000 (the CPU study: 200)")
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-root", type=Path, default=SHARED,
                        help="folder with cifar10-train, cifar10-test, imagenet-val-1300")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: see doc)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.train_per_class, args.test_per_class = 1, 1, 100, 50
    elif args.recipe == "cpu-small":  # what a shared 2-core CPU affords (see the module doc)
        args.train_per_class = args.train_per_class or CPU_TRAIN_PER_CLASS
        args.test_per_class = args.test_per_class or CPU_TEST_PER_CLASS
    chosen = args.losses.split(",")
    unknown = [name for name in chosen if name not in LOSSES]
    if unknown:
        from oodbench.errors import UnknownNameError

        sys.exit(str(UnknownNameError("loss of the table", unknown[0], LOSSES)))
    if not (args.data_root / "cifar10-train").is_dir():
        sys.exit(f"needs {args.data_root}/cifar10-train, cifar10-test and imagenet-val-1300 "
                 "(see ../shared/data/README.md)")
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick its kernels
    name = ("loss_table_quick" if args.quick else "loss_table" if args.recipe == "cpu-small"
            else f"loss_table_{args.recipe}")
    result_file = args.out or OUT / f"{name}.json"
    recipe = RECIPES[args.recipe] if args.epochs is None else RECIPES[args.recipe].scaled(
        epochs=args.epochs)
    t0, load_start = time.perf_counter(), os.getloadavg()
    data = load_data(args.data_root, args.train_per_class, args.test_per_class)
    print(f"data: {len(data['train'])} train, {len(data['id'])} ID test, {len(data['near'])} "
          f"held-out, {len(data['far'])} far ({time.perf_counter() - t0:.0f} s)", flush=True)
    runs: list[dict[str, Any]] = []
    failed: list[str] = []
    seeds = ([int(v) for v in args.seed_list.split(",")] if args.seed_list
             else list(range(args.seeds)))
    for seed in seeds:
        for loss in chosen:
            start = time.perf_counter()
            try:
                record = one_run(args.recipe, data, loss, seed, args.device, args.epochs)
            except Exception:  # one failed run must not lose the others
                failed.append(f"{loss} seed {seed}")
                traceback.print_exc()
                continue
            runs.append(record)
            print(f"{loss:9s} seed {seed}: acc {record['id_accuracy']:.3f}  MSP near "
                  f"{record['msp']['near']:.3f} far {record['msp']['far']:.3f}  "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
            result_file.parent.mkdir(parents=True, exist_ok=True)
            result_file.write_text(json.dumps({
                "settings": {"recipe": args.recipe, "recipe_fields": recipe.as_dict(),
                             "seeds": args.seeds, "train_images": len(data["train"]),
                             "id_test_images": len(data["id"]),
                             "near_images": len(data["near"]), "far_images": len(data["far"]),
                             "id_classes": list(ID), "held_out_classes": list(data["near"].class_names),
                             "losses": {k: LOSSES[k] for k in chosen}, "device": args.device},
                "machine": platform.platform(), "torch": torch.__version__,
                "threads": torch.get_num_threads(), "load_average_start": load_start,
                "load_average_now": os.getloadavg(),
                "wall_seconds": time.perf_counter() - t0, "failed": failed,
                "runs_finished_between": [min(r["finished_at"] for r in runs),
                                          max(r["finished_at"] for r in runs)],
                "runs": runs, "per_loss": summarise(runs),
                "comparisons_with_ce": compare_with_ce(runs),
            }, indent=1))
    print_table(summarise(runs), compare_with_ce(runs))
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; wrote {result_file}")
    if failed:
        sys.exit(f"{len(failed)} run(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
