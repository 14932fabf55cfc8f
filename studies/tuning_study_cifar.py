"""Tuning study at CIFAR scale: tuning without OOD data (arXiv 2602.05935) on the loss study's
CE network, with variants trained from scratch.

    OODBENCH_CACHE=/path/to/cache .venv/bin/python studies/tuning_study_cifar.py --train-only
    OODBENCH_CACHE=/path/to/cache .venv/bin/python studies/tuning_study_cifar.py

(``studies/tuning_study.py --cifar`` runs the second.) Resumable: every training writes a
checkpoint per epoch under ``$OODBENCH_CACHE`` and every finished row is written to the JSON
(``studies/results/tuning_study_cifar.json``) at once; the same command continues.

Setting (what the issue asks for, nothing tuned toward the paper's answer):

* **Network**: the 32 px recipe's CPU network (``oodbench.train.recipe``, ``cpu-resnet9``:
  ResNet-9 at width 16, 20 epochs, bfloat16), trained with CE at seed 0 on the 30,000 training
  images of the loss study's 6 ID classes of CIFAR-10 (``studies/loss_table.py``: airplane,
  automobile, bird, cat, deer, dog); its cache folder is the loss study's
  (``$OODBENCH_CACHE/loss_table/<run key>``), so either study reuses the other's run. Its
  weights are committed (``studies/results/tuning_study_cifar_network.safetensors``) and the
  JSON records their SHA-256: rows made in several sessions are pooled only on the same bits.
* **ID**: ``fit`` = those training images; the 6,000 ID test images split per class by a
  seeded draw into ``id_val`` (500 per class: what every protocol may look at) and ``id_test``
  (the other 500: only evaluated).
* **OOD**: of the 4 other CIFAR-10 classes (test images), one drawn by
  ``numpy.random.default_rng(0)`` is the OOD-val set of the ``ood_val`` protocol; the
  remaining 3 are the near-OOD test set; far-OOD test = the 1,300 shared ImageNet validation
  images at 32 px.
* **Detectors**: ASH-B, ReAct, VRA+, KNN, PLF (oodbench's reading of PLF: its source, arXiv
  2506.14194, could not be read) in App. A's spaces (``space="paper"``).
* **Protocols** (criterion AUROC, Bayesian optimisation with a Gaussian-process surrogate,
  ``N_TRIALS`` = 30 trials per search, of which Optuna's GPSampler draws its first 10 at
  random: a third):
  ``scratch``: ``held_out_paper`` with ``retrain="scratch"`` (variants trained from scratch
  with the same recipe on the kept classes only), M in {1, 2, 3}, N = 3, S = 5;
  ``last_block``: the same with ``retrain="last_block"`` (3 epochs of the last block and head
  from cached block inputs: variants that did see the withheld classes);
  ``noise``: Gaussian-noise images (sigma in {32, 64, 128}, Eq. 3); ``fgsm``: FGSM
  perturbations of ``id_val`` (eps in {0.005, 0.01, 0.1}, Eq. 3-4), each with S = 5 sets;
  ``ood_val``: the OOD-val class; ``defaults``: the detector's defaults, untuned.
  Seeds 0, 1, 2 for every tuned protocol (variants, draws and sampler); defaults once.
* **Threads**: one torch thread by default (``--threads``): on the shared 2-core machine the
  first epoch of the network cost 72 CPU-s with two threads against about 40 CPU-s per epoch
  in the loss study's one-thread workers.
* **Claims** (:func:`claims`, rules fixed before any result): one sentence per claim of the
  paper, from the means over the seeds; a difference counts only when a mean lies outside the
  other row's mean DeLong 95 % interval, else "not resolved at this scale".
* **Evaluation**: near and far AUROC of the ID test half against each test set, with
  DeLong's 95 % interval (logit); per row the wall and CPU time (``time.process_time``:
  a row that trains variants includes their training; later rows reuse them) and the
  per-variant training CPU time read back from the checkpoints.

``--train-only`` trains the network and every scratch variant (seed by seed) and stops: the
long part, which the full run would otherwise do on the way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import metrics
from oodbench.config import cache_dir
from oodbench.data.arrays import ArraySource
from oodbench.detectors import Detector, create
from oodbench.extract import extract
from oodbench.extract.activations import Activations
from oodbench.models._adapter import state_dict_digest
from oodbench.train.recipe import RECIPES, run_key, train_recipe
from oodbench.train.tensor_images import TensorImages, eval_transform
from oodbench.tuning import tune
from oodbench.tuning.protocols.held_out import HeldOutClasses, VariantFactory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loss_table import ID, SHARED, load_data  # noqa: E402 - the loss study's data

RESULTS = Path(__file__).resolve().parent / "results"
NETWORK = RESULTS / "tuning_study_cifar_network.safetensors"
README = Path(__file__).resolve().parents[1] / "README.md"
RECIPE = "cpu-resnet9"
STUDY = {"ASH": "ash_b", "ReAct": "react", "VRA": "vra_plus", "KNN": "knn", "PLF": "plf"}
#: how the README's table and claims name each row label (the JSON keeps the short labels)
NAMES = {"ASH": "ASH-B", "ReAct": "ReAct", "VRA": "VRA+", "KNN": "KNN",
         "PLF": "PLF, oodbench's reading"}
PROTOCOLS = ("scratch", "last_block", "noise", "fgsm", "ood_val")
M_GRID, N_VARIANTS, N_SETS, N_TRIALS = [1, 2, 3], 3, 5, 30
SEEDS = (0, 1, 2)
LAST_BLOCK_TRAIN = {"epochs": 3, "batch_size": 64, "lr": 0.01}
SCRATCH_TRAIN = {"recipe": RECIPE}
CAPTURE = ("logits", "features")


def code_version() -> str:
    """The commit the study runs from (``+changes`` when the work tree differs from it), for
    each row: rows of one JSON may come from several commits of a resumed study."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=False).stdout.strip()
    commit = git("rev-parse", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def as_source(images: TensorImages, name: str, names: list[str] | None) -> ArraySource:
    return ArraySource(images.images.permute(0, 2, 3, 1).numpy(), images.labels.numpy(),
                       name=name, class_names=names)


def original_network(train: TensorImages) -> Any:
    """The loss study's CE network, seed 0.

    Its weights are committed beside the JSON (``NETWORK``, 1.7 MB): the cache does not outlive
    a machine, and a network retrained on another CPU is not the same bits (bfloat16 kernels
    differ; on 2026-12-07 a retrained one had ID test accuracy 0.8710 where the first rows'
    network had 0.876), so rows computed in several sessions pool only through the committed
    file. Without it the network is trained (in the loss study's cache folder,
    ``$OODBENCH_CACHE/loss_table/<run key>``, so either study reuses the other's run) and
    written there."""
    from safetensors.torch import load_file, save_file

    recipe = RECIPES[RECIPE]
    if NETWORK.exists():
        model = recipe.build(len(ID), 0)
        model.load_state_dict(load_file(str(NETWORK)))
        log(f"network: {NETWORK.name} (committed weights)")
    else:
        out = cache_dir() / "loss_table" / run_key(recipe, train, "ce", {}, 0)
        model = train_recipe(recipe, train, loss="ce", seed=0, out=out, log=log).model
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(NETWORK))
        log(f"network trained; its weights written to {NETWORK}")
    model = model.cpu().eval()
    model.transform = eval_transform()
    model.class_names = list(ID)
    return model


def network_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the network's state (names, dtypes, shapes and bytes, in order; the digest
    oodbench's extraction cache keys use): the CE network is retrained whenever the cache is
    gone, and rows may only be pooled when they were computed on the same bits."""
    return state_dict_digest(model)


def same_network(report: dict[str, Any], sha: str, acts: dict[str, Activations]) -> str | None:
    """Why the report's rows were not computed on this network (None when they were).

    A report that records its network's hash must hold this one. An older report (no hash)
    is checked by its untuned rows: each detector's defaults scores depend only on the network's
    activations, so their AUROCs must come out exactly as stored."""
    if "network_sha256" in report:
        if report["network_sha256"] == sha:
            return None
        return (f"its rows were computed on network {report['network_sha256'][:12]}, "
                f"this is {sha[:12]}")
    for row in report["rows"]:
        if row["protocol"] != "defaults":
            continue
        now = evaluate(create(STUDY[row["detector"]]).fit(acts["fit"]), acts)
        for key in ("near_auroc", "far_auroc"):
            if now[key] != row[key]:
                return (f"{row['detector']} at defaults gives {key} {now[key]!r} on this network "
                        f"against {row[key]!r} stored")
    return None


def prepare(data_root: Path) -> dict[str, Any]:
    """The network and every set's activations (see the module docstring)."""
    data = load_data(data_root, None, None)
    model = original_network(data["train"])
    names = list(ID)
    test = data["id"]
    rng = np.random.default_rng(0)
    labels = test.labels.numpy()
    val_rows = np.sort(np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:500]
                                       for c in range(len(names))]))
    test_rows = np.setdiff1d(np.arange(len(labels)), val_rows)
    near = data["near"]
    ood_names = list(near.class_names)
    ood_val_class = ood_names[int(np.random.default_rng(0).integers(len(ood_names)))]
    sets = {
        "fit": as_source(data["train"], "cifar10-train[id]", names),
        "id_val": as_source(test, "cifar10-test[id]", names).subset(val_rows),
        "id_test": as_source(test, "cifar10-test[id]", names).subset(test_rows),
        "ood_val": as_source(near.select([ood_val_class], "ood-val"), "cifar10-test[ood-val]", None),
        "near": as_source(near.select([c for c in ood_names if c != ood_val_class], "near"),
                          "cifar10-test[near]", None),
        "far": as_source(data["far"], "imagenet-val-1300@32px", None),
    }
    acts = {}
    for key, source in sets.items():
        out = extract(model, source, capture=CAPTURE, progress=False)
        if key in ("ood_val", "near", "far"):
            from dataclasses import replace
            out = replace(out, labels=np.full(len(out.labels), -1))
        acts[key] = out
    return {"model": model, "acts": acts, "ood_val_class": ood_val_class,
            "near_classes": [c for c in ood_names if c != ood_val_class]}


def train_variants(model: Any, acts: dict[str, Activations], seeds: list[int]) -> None:
    """Every scratch variant of every seed (the same factory and keys as the full run)."""
    for seed in seeds:
        factory = VariantFactory(acts["fit"], acts["id_val"], HeldOutClasses(
            n_variants=N_VARIANTS, retrain="scratch", seed=seed, train=SCRATCH_TRAIN,
            held_out_fraction=min(0.5, max(M_GRID) / 6)), model)
        for m in M_GRID:
            tic, cpu = time.perf_counter(), time.process_time()
            factory.variants_m(m)
            log(f"seed {seed} M={m}: {N_VARIANTS} variants in {time.perf_counter() - tic:.0f} s "
                f"wall, {time.process_time() - cpu:.0f} s CPU")


def variant_costs() -> list[dict[str, Any]]:
    """Per trained scratch variant: its classes, epochs and training CPU / wall seconds (read
    from the checkpoints' histories)."""
    out = []
    root = cache_dir() / "tune" / "held_out" / "scratch"
    for state in sorted(root.glob("*/train.json")):
        record = json.loads(state.read_text())
        history = record.get("history", [])
        out.append({"folder": state.parent.name, "n_train": record["config"].get("n_train"),
                    "seed": record["config"].get("seed"), "epochs_done": record.get("epochs_done"),
                    "cpu_s": float(sum(h.get("cpu_seconds", 0.0) for h in history)),
                    "wall_s": float(sum(h.get("seconds", 0.0) for h in history))})
    return out


def merged_costs(recorded: list[dict[str, Any]], now: list[dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The report's variant costs with this cache's: a study continued on another machine (or
    from a copied cache) keeps the records of variants trained elsewhere; a folder measured
    again replaces its old record. Sorted by folder."""
    by_folder = {entry["folder"]: entry for entry in recorded}
    by_folder.update({entry["folder"]: entry for entry in now})
    return [by_folder[folder] for folder in sorted(by_folder)]


def evaluate(det: Detector, acts: dict[str, Activations]) -> dict[str, Any]:
    s_id = det.score(acts["id_test"])
    out: dict[str, Any] = {}
    for group in ("near", "far"):
        ci = metrics.auroc_ci(s_id, det.score(acts[group]))
        out[f"{group}_auroc"], out[f"{group}_ci"] = float(ci.estimate), [float(ci.low), float(ci.high)]
    return out


def run_row(name: str, protocol: str, seed: int, model: Any, acts: dict[str, Activations]
            ) -> tuple[Detector, dict[str, Any]]:
    fit, id_val = acts["fit"], acts["id_val"]
    common = {"fit": fit, "model": model, "search": "gp", "n_trials": N_TRIALS, "seed": seed}
    if protocol == "defaults":
        return create(name).fit(fit), {}
    if protocol == "ood_val":
        result = tune(name, "paper", id_val, acts["ood_val"], **common)
    elif protocol in ("scratch", "last_block"):
        train = SCRATCH_TRAIN if protocol == "scratch" else LAST_BLOCK_TRAIN
        result = tune(name, "paper", id_val, None, protocol="held_out_paper", **common,
                      held_out={"m_grid": M_GRID, "n_variants": N_VARIANTS,
                                "n_tuning_sets": N_SETS, "retrain": protocol, "seed": seed,
                                "train": train})
    else:
        result = tune(name, "paper", id_val, None, protocol=protocol, **common,
                      settings={"n_sets": N_SETS, "seed": seed})
    record = json.loads(result.tuning_record())
    return result.detector, {"hyperparams": result.detector.hyperparams, "tuning": record,
                             "criterion_at_choice": result.best_value}


_HELD: list[Any] = []


def open_lock() -> Any:
    """Hold an exclusive lock on ``$OODBENCH_CACHE/tuning_study_cifar.lock`` for the process's
    life; exit with a message when another study process holds it."""
    import fcntl

    path = cache_dir() / "tuning_study_cifar.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"another tuning_study_cifar process uses {cache_dir()}; wait for it to end")
    return handle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-only", action="store_true",
                        help="train the network and every scratch variant, then stop")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                        help="which of the study's seeds to run now (the claims need all)")
    parser.add_argument("--detectors", default=",".join(STUDY))
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help="which protocols to run now, in this order (default: the cheap "
                             "ones first, scratch last)")
    parser.add_argument("--data", type=Path, default=SHARED)
    parser.add_argument("--out", type=Path, default=RESULTS / "tuning_study_cifar.json")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: least CPU time per image on a shared machine)")
    parser.add_argument("--table", action="store_true",
                        help="only rewrite the README's block from the JSON at --out")
    args = parser.parse_args()
    if args.table:
        write_table(README, json.loads(args.out.read_text()))
        return
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    labels, protocols = args.detectors.split(","), args.protocols.split(",")
    bad = sorted(set(labels) - set(STUDY)) + sorted(set(protocols) - set(PROTOCOLS))
    if bad:
        parser.error(f"unknown detector label or protocol {bad}; labels {list(STUDY)}, "
                     f"protocols {list(PROTOCOLS)}")
    if not set(seeds) <= set(SEEDS):
        parser.error(f"--seeds {seeds}: the study's seeds are {list(SEEDS)}")
    _HELD.append(open_lock())  # one study process per cache: two would write one checkpoint
    log(f"cache {cache_dir()}; torch threads {torch.get_num_threads()}")
    prepared = prepare(args.data)
    model, acts = prepared["model"], prepared["acts"]
    log(f"network ready: ID test accuracy {float(np.mean(acts['id_test'].correct)):.4f}; "
        f"OOD-val class {prepared['ood_val_class']}, near {prepared['near_classes']}")
    if args.train_only:
        train_variants(model, acts, seeds)
        log("every scratch variant trained")
        return
    settings = {"recipe": RECIPE, "m_grid": M_GRID, "n_variants": N_VARIANTS, "n_sets": N_SETS,
                "n_trials": N_TRIALS, "search": "gp", "gp_random_startup": 10,
                "last_block_train": LAST_BLOCK_TRAIN, "seeds": list(SEEDS),
                "ood_val_class": prepared["ood_val_class"], "near_classes": prepared["near_classes"],
                "noise_sigmas": [32, 64, 128], "fgsm_eps": [0.005, 0.01, 0.1]}
    report: dict[str, Any] = {"settings": settings, "rows": []}
    sha = network_sha256(model)
    if args.out.exists():
        old = json.loads(args.out.read_text())
        if old.get("settings") == settings:
            why = same_network(old, sha, acts)
            if why is not None:
                sys.exit(f"{args.out} cannot be continued: {why}. Pass another --out to start "
                         "a study on this network.")
            report = old
    report["network_sha256"] = sha
    report.update({"n": {k: len(v.labels) for k, v in acts.items()},
                   "model_id_test_accuracy": float(np.mean(acts["id_test"].correct)),
                   "platform": platform.platform(), "torch_threads": torch.get_num_threads()})
    done = {(r["detector"], r["protocol"], r["seed"]) for r in report["rows"]}
    # by default the cheap rows first, so a study stopped part-way has every baseline, and the
    # scratch rows (which train the variants not yet in the cache) last; --protocols reorders
    order = protocols if args.protocols != parser.get_default("protocols") else (
        [p for p in PROTOCOLS if p != "scratch"] + ["scratch"])
    plan = [(label, "defaults", 0) for label in labels]
    plan += [(label, p, s) for p in order for s in seeds for label in labels]
    for label, protocol, seed in plan:
        if (label, protocol, seed) in done:
            continue
        tic, cpu, load = time.perf_counter(), time.process_time(), os.getloadavg()
        det, described = run_row(STUDY[label], protocol, seed, model, acts)
        row = {"detector": label, "protocol": protocol, "seed": seed,
               "wall_s": time.perf_counter() - tic, "cpu_s": time.process_time() - cpu,
               "loadavg_start": load, "code": code_version(), **described,
               **evaluate(det, acts)}
        report["rows"].append(row)
        report["variant_training"] = merged_costs(report.get("variant_training", []),
                                                  variant_costs())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        log(f"{label:<6} {protocol:<10} seed {seed}: near {row['near_auroc']:.4f} far "
            f"{row['far_auroc']:.4f} ({row['wall_s']:.0f} s, CPU {row['cpu_s']:.0f} s)")
    report["claims"] = claims(report["rows"], list(SEEDS))
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    for sentence in report["claims"]:
        print(sentence)
    log(f"wrote {args.out}")


def mean_row(rows: list[dict[str, Any]], label: str, protocol: str, seeds: list[int],
             group: str) -> tuple[float, float, float] | None:
    """(mean AUROC, mean interval low, mean interval high) over the seeds' rows, or None
    unless every seed has its row."""
    got = [r for r in rows if r["detector"] == label and r["protocol"] == protocol
           and r["seed"] in seeds]
    if len(got) < len(seeds):
        return None
    return (float(np.mean([r[f"{group}_auroc"] for r in got])),
            float(np.mean([r[f"{group}_ci"][0] for r in got])),
            float(np.mean([r[f"{group}_ci"][1] for r in got])))


def verdict(ours: tuple[float, float, float], other: tuple[float, float, float]) -> int:
    """+1: ``ours`` above ``other``'s (mean) DeLong interval, -1: below it, 0: inside."""
    return 1 if ours[0] > other[2] else (-1 if ours[0] < other[1] else 0)


def claims(rows: list[dict[str, Any]], seeds: list[int]) -> list[str]:
    """One sentence per claim of the paper, by rules fixed before any result was seen: means
    over the seeds; a difference counts when the mean lies outside the other row's mean DeLong
    95 % interval; otherwise "not resolved at this scale"."""
    out = []
    for group in ("near", "far"):
        parts = []
        for label in STUDY:
            ours, ref = (mean_row(rows, label, p, seeds, group) for p in ("scratch", "ood_val"))
            if ours is None or ref is None:
                parts.append(f"{NAMES[label]}: not run")
                continue
            v = verdict(ours, ref)
            parts.append(f"{NAMES[label]}: {'holds' if v >= 0 else 'does not hold'} "
                         f"({100 * ours[0]:.2f} vs {100 * ref[0]:.2f})")
        out.append(f"Held-out (scratch) comparable to OOD-val tuning, {group}-OOD AUROC: "
                   + "; ".join(parts) + ".")
    gains: dict[str, float] = {}
    for group in ("near", "far"):
        parts = []
        for label in STUDY:
            ours = mean_row(rows, label, "scratch", seeds, group)
            base = [mean_row(rows, label, p, seeds, group) for p in ("noise", "fgsm")]
            if ours is None or any(b is None for b in base):
                parts.append(f"{NAMES[label]}: not run")
                continue
            votes = [verdict(ours, b) for b in base if b is not None]
            word = ("holds" if min(votes) > 0 else "does not hold" if max(votes) < 0
                    else "not resolved at this scale")
            gains[f"{group}:{label}"] = ours[0] - max(b[0] for b in base if b is not None)
            parts.append(f"{NAMES[label]}: {word} ({100 * ours[0]:.2f} vs noise "
                         f"{100 * base[0][0]:.2f}, FGSM {100 * base[1][0]:.2f})")  # type: ignore[index]
        out.append(f"Held-out (scratch) better than noise and FGSM tuning, {group}-OOD AUROC: "
                   + "; ".join(parts) + ".")
    for group in ("near", "far"):
        high = [gains.get(f"{group}:{k}") for k in ("VRA", "PLF")]
        low = [gains.get(f"{group}:{k}") for k in ("ASH", "ReAct", "KNN")]
        if any(g is None for g in high + low):
            out.append(f"Larger gains for the higher-parameter families ({group}): not run.")
            continue
        hi, lo = [float(g) for g in high if g is not None], [float(g) for g in low if g is not None]
        word = ("holds" if min(hi) > max(lo) else "does not hold" if max(hi) < min(lo)
                else "not resolved at this scale")
        out.append(f"Larger gains over the best of noise / FGSM for the higher-parameter "
                   f"families (VRA+, PLF) than for ASH-B, ReAct, KNN ({group}-OOD): {word} "
                   f"(gains in points: VRA+ {100 * hi[0]:.2f}, PLF {100 * hi[1]:.2f}; ASH-B "
                   f"{100 * lo[0]:.2f}, ReAct {100 * lo[1]:.2f}, KNN {100 * lo[2]:.2f}).")
    return out


#: the README table's columns, in order: (protocol key, column heading)
TABLE_COLUMNS = (("defaults", "defaults"), ("ood_val", "OOD-val"), ("scratch", "held-out, scratch"),
                 ("last_block", "held-out, last block"), ("noise", "noise"), ("fgsm", "FGSM"))
#: the README's markers around the generated block (``--table`` writes what lies between)
TABLE_START, TABLE_END = "<!-- tuning-study-cifar:start -->", "<!-- tuning-study-cifar:end -->"


def _cell(rows: list[dict[str, Any]], label: str, protocol: str, seeds: list[int]) -> str:
    """``near [mean DeLong interval] / far`` in %, the means over the seeds whose row is done
    (all seeds: no mark; fewer: "seeds 0, 1 of 3"), or "-" when none is."""
    got = sorted((r for r in rows if r["detector"] == label and r["protocol"] == protocol),
                 key=lambda r: r["seed"])
    if not got:
        return "-"
    near = 100 * np.mean([r["near_auroc"] for r in got])
    low, high = (100 * np.mean([r["near_ci"][i] for r in got]) for i in (0, 1))
    far = 100 * np.mean([r["far_auroc"] for r in got])
    text = f"{near:.2f} [{low:.1f}, {high:.1f}] / {far:.2f}"
    wanted = [0] if protocol == "defaults" else seeds
    done = [r["seed"] for r in got]
    if done != wanted:
        text += f" (seed{'s' if len(done) > 1 else ''} {', '.join(map(str, done))} of {len(wanted)})"
    return text


def render_table(report: dict[str, Any]) -> str:
    """The README's block for this study, from its JSON alone: how many rows are done, a table
    of near [DeLong 95 % interval] / far AUROC per detector and protocol (means over the seeds
    done), the CPU time per tuned row, and the claims' sentences (``not run`` until every seed
    of a claim's rows is done)."""
    rows, seeds = report["rows"], list(report["settings"]["seeds"])
    planned = len(STUDY) * (1 + len(PROTOCOLS) * len(seeds))
    lines = [f"Rows done: {len(rows)} of {planned} (JSON `studies/results/tuning_study_cifar.json`"
             f"; ID test accuracy {100 * report['model_id_test_accuracy']:.1f} %, "
             f"{report['n']['id_test']:,} ID test, {report['n']['near']:,} near, "
             f"{report['n']['far']:,} far images). Near [DeLong 95 % interval] / far AUROC in %, "
             "means over the seeds done:", "",
             "| detector | " + " | ".join(h for _, h in TABLE_COLUMNS) + " | CPU-s per tuned row |",
             "|---" * (len(TABLE_COLUMNS) + 2) + "|"]
    for label, code in STUDY.items():
        tuned = [r["cpu_s"] for r in rows if r["detector"] == label and r["protocol"] != "defaults"]
        cost = ("-" if not tuned else f"{min(tuned):.0f}" if len(tuned) == 1
                else f"{min(tuned):.0f}-{max(tuned):.0f}")
        cells = [_cell(rows, label, p, seeds) for p, _ in TABLE_COLUMNS]
        lines.append(f"| {NAMES[label]} (`{code}`) | " + " | ".join(cells) + f" | {cost} |")
    lines += ["", "Claims (rules fixed in `claims` before any result):", ""]
    lines += [f"- {sentence}" for sentence in claims(rows, seeds)]
    return "\n".join(lines)


def write_table(readme: Path, report: dict[str, Any]) -> None:
    """Replace the block between the README's markers with :func:`render_table`."""
    text = readme.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    readme.write_text(text[:start] + "\n" + render_table(report) + "\n" + text[end:])


if __name__ == "__main__":
    main()
