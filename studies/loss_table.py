"""A small-scale reproduction of the training-loss table of Spratling & Schütt (arXiv 2501.12191).

    .venv/bin/python studies/loss_table.py                       # the CPU study (5 x 3 runs)
    .venv/bin/python studies/loss_table.py &  # a second worker on the other core: the same
    .venv/bin/python studies/loss_table.py --quick               # 1 seed, tiny subsets
    .venv/bin/python studies/loss_table.py --recipe gpu-resnet18 --device cuda   # full scale

The published unknown-class rejection AUROCs on ImageNet-1k (ResNet-50 / Swin-T / ViT-B/16,
``../shared/data/leaderboards/imagenet1k_ood_losses.csv``): LogitNorm 85.53 / 78.09 / 64.3,
HEM 81.77 / 85.09 / 67.12, CE 72.88 / 74.95 / 62.64, MM 60.5 / 54.16 / 56.75, Dice 43.83 /
51.34 / 38.17: the ordering LogitNorm ~ HEM > CE > MM > Dice.

Here, on real data that ships with the project (``../shared/data``):

* **ID**: CIFAR-10 classes 0-5 (airplane, automobile, bird, cat, deer, dog): by default all
  5,000 training images of each class of ``cifar10-train`` and all 1,000 test images of each
  class of ``cifar10-test`` (``--train-per-class`` / ``--test-per-class`` keep the first N).
  The CPU study is the recipe ``cpu-resnet9`` (Page's ResNet-9 at width 16, bfloat16, 20
  epochs; its docstring says why that size); ``loss_table_cpu-resnet8.json`` (ResNet-8, 10
  epochs: CE at 77.4 %) and ``loss_table_cpu-small.json`` (1 epoch over 1,000 images per
  class) are earlier, too short studies kept for the record.
* **Near (class-OOD)**: the held-out classes 6-9 (frog, horse, ship, truck) of ``cifar10-test``.
* **Far**: the 1,300 ImageNet validation images of ``imagenet-val-1300`` down-sampled to 32 px.
* **Training**: the small-image recipe ``oodbench.train.recipe`` (``--recipe``; a residual
  network for 32 px images, images in memory, crop + flip on tensors, channels-last, SGD
  momentum 0.9, weight decay 5e-4, linear warm-up then cosine to 0; logits for the detectors
  in float32), identical for every loss, as in the paper, which trained
  every loss with CE's settings. Loss settings, each its paper's: CE plain; LogitNorm
  tau = 0.04 (Wei et al., ICML 2022, their CIFAR-10 value); HEM margin 1 (Spratling & Schütt,
  their value for balanced data); MM margin 1 (torch's MultiMarginLoss, HEM's reference code);
  Dice without options (soft Dice over the batch).
* **Detectors**: MSP, max-logit and energy (``oodbench.detectors``); AUROC with DeLong's 95 %
  interval (``oodbench.metrics.delong.auroc_ci``); each loss against CE by DeLong's paired test
  on the same test images, per seed.

The runs go in this order: CE's seeds first, then one seed of every other loss, then the other
seeds, so a study stopped part-way has CE's spread and one run of each loss. Workers started
side by side on the same cache share the work: a run another worker holds is skipped and
come back to at the end. Each (loss, seed) is cached by content (recipe, data fingerprint, loss, options, seed) under
``$OODBENCH_CACHE/loss_table/<key>/``: the per-epoch checkpoints (a killed run resumes from its
last epoch) and, once evaluated, the logits and the record, so an interrupted study continues
where it stopped. Nothing is tuned to match the paper. After every run, each worker writes
``studies/results/loss_table.json`` (``loss_table_quick.json``, ``loss_table_<recipe>.json``
for another recipe) from every run of the plan found in the cache (so it shows what all workers
and earlier sessions finished, and lists the runs still missing), with per run: when it started
and finished, its wall and CPU time (``time.process_time``; a paused or crowded-out worker
spends wall time but no CPU time) and the load average at its start and end; for the study:
the summed CPU time and the span from the first start to the last finish.
"""

from __future__ import annotations

import argparse
import datetime
import errno
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
from oodbench.atomic_files import write_json
from oodbench.config import cache_dir
from oodbench.data.folder import ImageFolder
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.extract.activations import Activations
from oodbench.metrics.delong import auroc_ci, delong_test
from oodbench.train import checkpoint as ckpt
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
#: the recipe of the CPU study (its result file is ``loss_table.json``)
DEFAULT_RECIPE = "cpu-resnet9"
#: what the issue asks of CE before the table says anything
CE_ACCURACY_TARGET = 0.85
NAMES = {"ce": "CE", "logitnorm": "LN", "hem": "HEM", "mm": "MM", "dice": "DICE"}


def load_data(root: Path, train_per_class: int | None, test_per_class: int | None
              ) -> dict[str, TensorImages]:
    """The four image sets; ``root`` holds ``cifar10-train``, ``cifar10-test`` and either
    ``imagenet-val-1300`` or its 32 px copy ``imagenet-val-1300-32px/<any>/*.png`` (what
    ``studies/gpu_loss_table.sh`` packs for a device machine; the same pixels)."""
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


def plan(losses: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """The run order: CE's seeds, then the first seed of every other loss, then the rest."""
    first = [("ce", seed) for seed in seeds] if "ce" in losses else []
    rest = [(loss, seed) for seed in seeds for loss in losses if loss != "ce"]
    return first + rest


def run_folder(recipe: Recipe, data: dict[str, TensorImages], loss: str, seed: int
               ) -> tuple[str, Path]:
    key = run_key(recipe, data["train"], loss, LOSSES[loss], seed)
    return key, cache_dir() / "loss_table" / key


def cached_record(folder: Path) -> dict[str, Any] | None:
    record_file = folder / "record.json"
    if record_file.is_file() and (folder / "logits.npz").is_file():
        return _read_record(record_file)
    return None


def one_run(recipe: Recipe, data: dict[str, TensorImages], loss: str, seed: int, device: str,
            *, wait: bool = True) -> dict[str, Any] | None:
    """Train and evaluate one (loss, seed), or read it back from its cache folder. With
    ``wait=False``, ``None`` when another worker holds the run."""
    key, folder = run_folder(recipe, data, loss, seed)
    done = cached_record(folder)
    if done is not None:
        return done
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return None  # another worker trains it
            raise
        done = cached_record(folder)
        if done is None:
            _train_and_evaluate(recipe, data, loss, seed, device, key, folder)
            done = cached_record(folder)
        return done


def _read_record(file: Path) -> dict[str, Any]:
    """A finished run's record, with the time it was written (a study's wall clock)."""
    finished = datetime.datetime.fromtimestamp(file.stat().st_mtime, datetime.timezone.utc)
    return {**json.loads(file.read_text()), "finished_at": finished.isoformat(timespec="seconds")}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _train_and_evaluate(recipe: Recipe, data: dict[str, TensorImages], loss: str, seed: int,
                        device: str, key: str, folder: Path) -> None:
    started, load_start = _now(), os.getloadavg()
    result = train_recipe(recipe, data["train"], loss=loss, loss_options=LOSSES[loss], seed=seed,
                          device=device, out=folder / "checkpoint",
                          log=lambda line: print(line, flush=True))
    wall, cpu = time.perf_counter(), time.process_time()
    logits = {k: predict_logits(result.model, data[k], recipe, device) for k in SETS}
    record = {"loss": loss, "seed": seed, "key": key, "loss_options": LOSSES[loss],
              "started_at": started, "epochs": len(result.history),
              "train_seconds": result.train_seconds,
              "train_cpu_seconds": result.train_cpu_seconds,
              "eval_seconds": time.perf_counter() - wall,
              "eval_cpu_seconds": time.process_time() - cpu,
              "load_average_start": load_start, "load_average_end": os.getloadavg(),
              "images_per_s": float(np.mean([h["images_per_s"] for h in result.history])),
              "final_train_loss": result.history[-1]["loss"],
              "final_train_accuracy": result.history[-1]["train_accuracy"],
              **evaluate(logits, data["id"].labels.numpy())}
    np.savez(folder / "logits.npz", **logits)
    (folder / "record.json").write_text(json.dumps(record, indent=1))


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


def in_progress(recipe: Recipe, data: dict[str, TensorImages], planned: list[tuple[str, int]]
                ) -> list[dict[str, Any]]:
    """The unfinished runs that have epoch checkpoints: how far each got (not results)."""
    out = []
    for loss, seed in planned:
        folder = run_folder(recipe, data, loss, seed)[1]
        state = folder / "checkpoint" / ckpt.STATE
        if cached_record(folder) is None and state.is_file():
            history = json.loads(state.read_text())["history"]
            out.append({"loss": loss, "seed": seed, "epochs_done": len(history),
                        "epochs": recipe.epochs,
                        "train_accuracy_per_epoch": [h["train_accuracy"] for h in history],
                        "train_seconds": sum(h["seconds"] for h in history),
                        "train_cpu_seconds": sum(h.get("cpu_seconds", float("nan"))
                                                 for h in history)})
    return out


def study_timing(runs: list[dict[str, Any]], planned: list[tuple[str, int]]) -> dict[str, Any]:
    """What was run and what it cost: runs done and missing, summed wall and CPU time, the span
    from the first start to the last finish, and each run's load average."""
    done = {(r["loss"], r["seed"]) for r in runs}

    def total(field: str) -> float:
        return float(sum(r.get(field, float("nan")) for r in runs))

    starts = [r["started_at"] for r in runs if "started_at" in r]
    span = (datetime.datetime.fromisoformat(max(r["finished_at"] for r in runs))
            - datetime.datetime.fromisoformat(min(starts))).total_seconds() if starts else None
    return {
        "runs_done": [f"{loss}/{seed}" for loss, seed in planned if (loss, seed) in done],
        "runs_missing": [f"{loss}/{seed}" for loss, seed in planned if (loss, seed) not in done],
        "wall_seconds_summed": total("train_seconds") + total("eval_seconds"),
        "cpu_seconds_summed": total("train_cpu_seconds") + total("eval_cpu_seconds"),
        "first_started": min(starts) if starts else None,
        "last_finished": max(r["finished_at"] for r in runs),
        "span_seconds": span,
        "per_run": [{k: r.get(k) for k in ("loss", "seed", "started_at", "finished_at",
                                           "train_seconds", "train_cpu_seconds",
                                           "eval_seconds", "eval_cpu_seconds",
                                           "load_average_start", "load_average_end")}
                    for r in runs],
        "note": "wall times on a shared machine count time given to other processes (and any "
                "SIGSTOP); CPU times are this worker's process_time and do not",
    }


def statements(summary: dict[str, Any], comparisons: dict[str, Any]) -> dict[str, Any]:
    """The issue's checks on CE, each loss's accuracy against CE's, and one sentence per
    published comparison (MSP on the held-out classes, paired DeLong per seed)."""
    out: dict[str, Any] = {}
    ce = summary.get("ce")
    if ce is not None:
        acc = ce["id_accuracy"]
        intervals = ce["msp"]["near"]["intervals"]
        out["ce_id_accuracy"] = {
            "target": CE_ACCURACY_TARGET, "mean": acc["mean"], "seeds": ce["seeds"],
            "met": bool(min(acc["values"]) >= CE_ACCURACY_TARGET)}
        out["ce_msp_near_above_chance"] = {
            "intervals": intervals, "seeds": ce["seeds"],
            "met": bool(all(low > 0.5 for low, _ in intervals))}
        out["accuracy_minus_ce_points"] = {
            loss: 100 * (entry["id_accuracy"]["mean"] - acc["mean"])
            for loss, entry in summary.items() if loss != "ce"}
    sentences = {}
    for loss, entry in comparisons.items():
        c = entry["msp/near"]
        seeds = len(c["per_seed"])
        sentences[loss] = (
            f"{NAMES[loss]} vs CE (published: {NAMES[loss]} {c['published']}; MSP AUROC on the "
            f"held-out classes, paired DeLong per seed, {seeds} seed{'s' * (seeds != 1)}, mean "
            f"difference {100 * c['mean_difference']:+.1f} points): {c['verdict']}.")
    out["published_comparisons"] = sentences
    return out


def write_results(result_file: Path, recipe_name: str, recipe: Recipe,
                  data: dict[str, TensorImages], chosen: list[str], planned: list[tuple[str, int]],
                  device: str, failed: list[str]) -> dict[str, Any]:
    """The result JSON from every run of the plan that is in the cache (any worker's)."""
    runs = [r for loss, seed in planned
            if (r := cached_record(run_folder(recipe, data, loss, seed)[1])) is not None]
    summary, comparisons = summarise(runs), compare_with_ce(runs)
    result = {
        "settings": {"recipe": recipe_name, "recipe_fields": recipe.as_dict(),
                     "seeds": sorted({seed for _, seed in planned}),
                     "train_images": len(data["train"]), "id_test_images": len(data["id"]),
                     "near_images": len(data["near"]), "far_images": len(data["far"]),
                     "id_classes": list(ID), "held_out_classes": list(data["near"].class_names),
                     "far_data": data["far"].name, "losses": {k: LOSSES[k] for k in chosen},
                     "device": device},
        "machine": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "failed_in_this_worker": failed,
        "study": study_timing(runs, planned) if runs else {
            "runs_done": [], "runs_missing": [f"{loss}/{seed}" for loss, seed in planned]},
        "in_progress": in_progress(recipe, data, planned),
        "statements": statements(summary, comparisons),
        "runs": runs, "per_loss": summary, "comparisons_with_ce": comparisons,
    }
    result_file.parent.mkdir(parents=True, exist_ok=True)
    write_json(result_file, result)  # atomic: two workers may write it in turn
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 1 epoch, small subsets")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, choices=sorted(RECIPES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs")
    parser.add_argument("--train-per-class", type=int, default=None, help="default: all 5,000")
    parser.add_argument("--test-per-class", type=int, default=None, help="default: all 1,000")
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-root", type=Path, default=SHARED,
                        help="folder with cifar10-train, cifar10-test, imagenet-val-1300")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: see doc)")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: write the result file from what is in the cache")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.train_per_class, args.test_per_class = 1, 1, 100, 50
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
    name = ("loss_table_quick" if args.quick else "loss_table" if args.recipe == DEFAULT_RECIPE
            else f"loss_table_{args.recipe}")
    result_file = args.out or OUT / f"{name}.json"
    recipe = RECIPES[args.recipe] if args.epochs is None else RECIPES[args.recipe].scaled(
        epochs=args.epochs)
    t0 = time.perf_counter()
    data = load_data(args.data_root, args.train_per_class, args.test_per_class)
    print(f"data: {len(data['train'])} train, {len(data['id'])} ID test, {len(data['near'])} "
          f"held-out, {len(data['far'])} far ({time.perf_counter() - t0:.0f} s)", flush=True)
    planned = plan(chosen, list(range(args.seeds)))
    failed: list[str] = []
    pending, wait = ([] if args.report else list(planned)), False
    while pending:
        deferred = []
        for loss, seed in pending:
            start = time.perf_counter()
            try:
                record = one_run(recipe, data, loss, seed, args.device, wait=wait)
            except Exception:  # one failed run must not lose the others
                failed.append(f"{loss} seed {seed}")
                traceback.print_exc()
                continue
            if record is None:
                deferred.append((loss, seed))
                continue
            print(f"{loss:9s} seed {seed}: acc {record['id_accuracy']:.3f}  MSP near "
                  f"{record['msp']['near']:.3f} far {record['msp']['far']:.3f}  "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
            write_results(result_file, args.recipe, recipe, data, chosen, planned, args.device,
                          failed)
        pending, wait = deferred, True  # what other workers held: wait for them, read back
    result = write_results(result_file, args.recipe, recipe, data, chosen, planned, args.device,
                           failed)
    print_table(result["per_loss"], result["comparisons_with_ce"])
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; wrote {result_file}")
    if failed:
        sys.exit(f"{len(failed)} run(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
