"""Tuning study: ASH-B, ReAct, VRA+, KNN and PLF on EfficientNet-Lite0 (real ImageNet weights),
each (a) tuned on an OOD validation set (OpenOOD's protocol), (b) tuned without OOD data by
Algorithms 1-4 of Mondal et al., arXiv 2602.05935 (``protocol="held_out_paper"``) with
``retrain="last_block"`` and, beside it, ``retrain="head"``, (c) left at its defaults; all
evaluated on OOD sets that neither tuning saw, printed next to the published ImageNet-1K
ResNet-50 rows (``../shared/data/leaderboards/imagenet1k_resnet50_tuning.csv``; far-OOD from the
paper's Table 3).

    .venv/bin/python studies/tuning_study.py            # head and last-block seeds 0-3, 16 GP trials
    .venv/bin/python studies/tuning_study.py --quick    # seed 0 only (both), 12 trials
    .venv/bin/python studies/tuning_study.py --cifar    # the CIFAR-scale study instead
                                                        # (studies/tuning_study_cifar.py)

Definitions, spaces and search: VRA+ as App. A defines it (``vra_plus.py``), PLF in oodbench's
reading of App. A (``oodbench/detectors/plf.py``: PLF's own source, arXiv 2506.14194, could not
be read), App. A's search spaces (``grid="paper"``, ``oodbench/tuning/spaces.toml``), Bayesian
optimisation with a Gaussian-process surrogate (Optuna's GPSampler), criterion AUROC, for both
(a) and (b), so that only the protocol differs.

Data (``../shared/data``): the 1,300 ImageNet validation images are ID and 300 CIFAR-10 test
images (``PER_CIFAR_CLASS`` = 30 per class, seeded; fewer than the 100 of the earlier study, to
fit the machine) are OOD; one forward pass each (``oodbench.extract``, cached).
The ID images are halved (``real_detectors.split_halves``): the test half only evaluates; the
tuning half is split by class into ``fit`` and ``id_val`` (``oodbench.tuning.split``). CIFAR
classes are ranked by the model's mean max-softmax on them: the four most confident are "near",
the four least "far", the two middle ones the OOD validation set of (a). Near / far AUROC: the
ID test half against the pooled images of the group, with DeLong's 95 % interval (logit).

Scale (this 2-core shared machine): M in {45, 90} withheld classes of ~450 (10 % and 20 %;
the paper's ImageNet-1K grid is 5-30 %), N = 2 variants per M, S = 3 balanced tuning sets,
16 GP trials per search (10 random start-up points, 6 GP-guided: for PLF's seven parameters
close to random search); last-block variants train 3 epochs (the last MBConv block, conv_head,
bn2 and the head, from cached block inputs). KNN's K_max is the paper's 500 capped below the
smallest variant bank. ``retrain="last_block"`` and ``retrain="head"`` each at seeds 0-3 (the
spread of phi, M* and AUROC over seeds, as mean and sample standard deviation, ddof =
``SPREAD_DDOF``; same seed -> same choice is a unit test). Each row records wall and CPU time
and the load average; rows are saved as they finish and a re-run keeps them (same settings),
together with any top-level entries the script does not write itself (notes, the record of a
row computed twice), so ``--detectors`` can split the remaining rows over processes writing
copies of the JSON (``--out``), merged afterwards. Nothing here is tuned toward published
numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import metrics, models
from oodbench.data import ImageFolder
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.detectors import Detector, create
from oodbench.extract import extract
from oodbench.extract.activations import Activations
from oodbench.tuning import Range, TuneResult, tune
from oodbench.tuning.paper_space import paper_space
from oodbench.tuning.split import split_by_class

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_detectors import split_halves  # noqa: E402 - the sibling study's split

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "efficientnet_lite0"
PER_CIFAR_CLASS = 30
#: the spread over seeds (printed tables and the README): the sample standard deviation
SPREAD_DDOF = 1
#: study label -> oodbench detector (App. A: ASH-B, ReAct, VRA+, KNN, PLF)
STUDY = {"ASH": "ash_b", "ReAct": "react", "VRA": "vra_plus", "KNN": "knn", "PLF": "plf"}
LAST_BLOCK_TRAIN = {"epochs": 3, "batch_size": 64, "lr": 0.01}
#: far-OOD AUROC of the ImageNet-1K ResNet-50 rows, arXiv 2602.05935 Table 3 (the CSV has near only)
PUBLISHED_FAR = {("ASH", "ood_val"): 95.74, ("ASH", "held_out"): 95.26, ("ReAct", "ood_val"): 93.67,
                 ("ReAct", "held_out"): 92.64, ("KNN", "ood_val"): 90.18, ("KNN", "held_out"): 89.93,
                 ("PLF", "ood_val"): 95.27, ("PLF", "held_out"): 91.90, ("VRA", "ood_val"): 94.89,
                 ("VRA", "held_out"): 91.85}
PUBLISHED_ID_ACC = 76.18  # Table 3: the same network for every row


def load_data(data: Path, batch_size: int) -> tuple[Any, Activations, Activations, list[str]]:
    """(the model, ID activations of the 1,300 ImageNet images, OOD activations of
    ``PER_CIFAR_CLASS`` seeded CIFAR-10 test images per class, the CIFAR class names)."""
    model = models.load(MODEL)
    cifar = ImageFolder(data / "cifar10-test", name="cifar10-test")
    labels = np.asarray(cifar.labels)
    rng = np.random.default_rng(0)
    rows = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == c), PER_CIFAR_CLASS,
                                              replace=False) for c in range(len(cifar.class_names))]))
    capture = ("logits", "features")
    id_all = extract(model, ImageNetVal(data / "imagenet-val-1300"), capture=capture,
                     batch_size=batch_size, progress=True)
    ood = extract(model, cifar.subset(rows), capture=capture, batch_size=batch_size, progress=True)
    return model, id_all, ood, list(cifar.class_names)


def severity_groups(ood: Activations, names: list[str]) -> dict[str, list[int]]:
    """CIFAR classes by the model's mean max-softmax, descending: near (4 most confident),
    val (the 2 middle ones), far (4 least confident)."""
    probs = torch.softmax(torch.tensor(np.asarray(ood.logits), dtype=torch.float64), dim=1)
    msp = probs.max(dim=1).values.numpy()
    labels = np.asarray(ood.labels)
    order = sorted(range(len(names)), key=lambda c: -float(msp[labels == c].mean()))
    return {"near": order[:4], "val": order[4:6], "far": order[6:]}


def shaped_accuracy(det: Detector, acts: Activations) -> float:
    """Top-1 accuracy of the logits after the detector's shaping (the model's own without)."""
    logits = np.asarray(acts.logits, dtype=np.float64)
    if hasattr(det, "shape"):
        f = det.shape(torch.tensor(np.asarray(acts.features), dtype=torch.float64)).numpy()
        logits = f @ np.asarray(acts.head_weight, dtype=np.float64).T + acts.head_bias
    return float((logits.argmax(axis=1) == np.asarray(acts.labels)).mean())


def evaluate_detector(det: Detector, id_test: Activations, ood: Activations,
                      groups: dict[str, list[int]]) -> dict[str, Any]:
    """Near/far AUROC of the pooled group with DeLong's 95 % interval; ID accuracy."""
    id_scores, ood_scores = det.score(id_test), det.score(ood)
    labels = np.asarray(ood.labels)
    out: dict[str, Any] = {"id_accuracy": shaped_accuracy(det, id_test)}
    for group in ("near", "far", "val"):
        ci = metrics.auroc_ci(id_scores, ood_scores[np.isin(labels, groups[group])])
        out[f"{group}_auroc"], out[f"{group}_ci"] = float(ci.estimate), [float(ci.low), float(ci.high)]
    return out


def spaces_for(fit: Activations, smallest_bank: int) -> dict[str, dict[str, Range]]:
    """App. A's spaces; KNN's K_max (500) capped below the smallest bank a variant fits on."""
    out = {label: paper_space(name, fit) for label, name in STUDY.items()}
    out["KNN"] = {"k": Range(1, min(500, smallest_bank - 1))}
    return out


def describe(result: TuneResult | None, det: Detector) -> dict[str, Any]:
    if result is None:
        return {"hyperparams": det.hyperparams}
    record = json.loads(result.tuning_record())
    return {"hyperparams": det.hyperparams, "tuning": record, "criterion_at_choice": result.best_value}


def main() -> None:
    if "--cifar" in sys.argv[1:]:  # the CIFAR-scale study: its own script, JSON and options
        import tuning_study_cifar

        sys.argv.remove("--cifar")
        tuning_study_cifar.main()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3", help="held-out protocol seeds (retrain='head')")
    parser.add_argument("--last-block-seeds", default="0,1,2,3",
                        help="held-out seeds with retrain='last_block'")
    parser.add_argument("--n-trials", type=int, default=16, help="GP trials per search")
    parser.add_argument("--m-grid", default="45,90")
    parser.add_argument("--n-variants", type=int, default=2)
    parser.add_argument("--n-sets", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="seed 0 only (head and last_block), 12 trials")
    parser.add_argument("--detectors", default=",".join(STUDY),
                        help=f"study labels to run, of {','.join(STUDY)} (the others' rows are kept)")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    labels = args.detectors.split(",")
    unknown = sorted(set(labels) - set(STUDY))
    if unknown:
        parser.error(f"--detectors: unknown {unknown}; the study's labels are {list(STUDY)}")
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    block_seeds = [0] if args.quick else [int(s) for s in args.last_block_seeds.split(",")]
    n_trials = 12 if args.quick else args.n_trials
    m_grid = [int(m) for m in args.m_grid.split(",")]
    out_path = args.out or RESULTS / f"tuning_study{'_quick' if args.quick else ''}.json"

    model, id_all, ood_all, names = load_data(args.data, args.batch_size)
    tuning_rows, test_rows = split_halves(len(id_all), args.split_seed)
    tuning_half, id_test = id_all.subset(tuning_rows), id_all.subset(test_rows)
    fit_rows, val_rows = split_by_class(tuning_half.labels, args.split_seed)
    fit, id_val = tuning_half.subset(fit_rows), tuning_half.subset(val_rows)
    groups = severity_groups(ood_all, names)
    ood_labels = np.asarray(ood_all.labels)
    ood_val = ood_all.subset(np.flatnonzero(np.isin(ood_labels, groups["val"])))
    n_classes = int(np.unique(fit.labels).size)
    per_class = np.bincount(np.asarray(fit.labels)[np.asarray(fit.labels) >= 0])
    smallest_bank = int(len(fit) - np.sort(per_class)[::-1][: max(m_grid)].sum())
    spaces = spaces_for(fit, smallest_bank)
    settings = {"m_grid": m_grid, "n_variants": args.n_variants, "n_tuning_sets": args.n_sets}
    report: dict[str, Any] = {
        "model": MODEL, "n_fit": len(fit), "n_id_val": len(id_val), "n_id_test": len(id_test),
        "fit_classes": n_classes, "model_top1_id_test": float(np.mean(id_test.correct)),
        "ood_groups": {g: [names[c] for c in cs] for g, cs in groups.items()},
        "n_ood": {g: int(np.isin(ood_labels, cs).sum()) for g, cs in groups.items()},
        "held_out": settings, "last_block_train": LAST_BLOCK_TRAIN, "seeds": seeds,
        "last_block_seeds": block_seeds,
        "n_trials": n_trials, "search": "gp",
        "spaces": {k: {p: repr(d) for p, d in v.items()} for k, v in spaces.items()},
        "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
        "loadavg_start": os.getloadavg(), "rows": [],
    }
    if out_path.exists():  # resume: keep the rows already computed with the same settings
        old = json.loads(out_path.read_text())
        if all(old.get(k) == report[k] for k in ("held_out", "n_trials", "spaces", "last_block_train")):
            report["rows"] = old["rows"]
            kept = {k: v for k, v in old.items() if k not in report and k != "loadavg_end"}
            report.update(kept)  # notes and checks added by hand survive a re-run
    done = {(r["detector"], r["protocol"]) for r in report["rows"]}
    print(f"{MODEL}: fit {len(fit)} ({n_classes} classes), id_val {len(id_val)}, ID test "
          f"{len(id_test)} (top-1 {report['model_top1_id_test']:.4f}); OOD groups "
          f"{report['ood_groups']}; M grid {m_grid}", flush=True)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    def record(label: str, how: str, det: Detector, result: TuneResult | None, seconds: float,
               cpu_seconds: float) -> None:
        row = {"detector": label, "protocol": how, "tune_s": seconds, "tune_cpu_s": cpu_seconds,
               **describe(result, det),
               **evaluate_detector(det, id_test, ood_all, groups), "loadavg": os.getloadavg()}
        report["rows"].append(row)
        out_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
        extra = f"  M*={row['tuning']['m_star']}" if "m_star" in row.get("tuning", {}) else ""
        print(f"  {label:<6} {how:<26} near {row['near_auroc']:.4f}  far {row['far_auroc']:.4f}  "
              f"acc {row['id_accuracy']:.4f}{extra}  ({seconds:.1f} s, CPU {cpu_seconds:.1f} s)",
              flush=True)

    leaderboard = [("(a) OOD-val", None, 0), ("(b) head seed 0", "head", seeds[0]), ("(c) defaults", "", 0)]
    spread = [(f"(b) head seed {s}", "head", s) for s in seeds[1:]]
    blocks = [(f"(b) last_block seed {s}", "last_block", s) for s in block_seeds]
    # cheapest first (this machine is shared): the leaderboard rows, the other seeds, then the
    # last-block variants (one more image pass for their cached inputs, and their training)
    for plan in (leaderboard, spread, blocks):
        for label, name in ((k, v) for k, v in STUDY.items() if k in labels):
            for how, retrain, seed in plan:
                if (label, how) in done:
                    continue
                tic, cpu_tic = time.perf_counter(), time.process_time()
                result = None
                if retrain is None:
                    result = tune(name, spaces[label], id_val, ood_val, fit=fit, search="gp",
                                  n_trials=n_trials, seed=0)
                elif retrain:
                    train = LAST_BLOCK_TRAIN if retrain == "last_block" else {}
                    result = tune(name, spaces[label], id_val, None, fit=fit, model=model,
                                  protocol="held_out_paper", search="gp", n_trials=n_trials,
                                  seed=seed, held_out={**settings, "retrain": retrain, "seed": seed,
                                                       "train": train})
                det = result.detector if result is not None else create(name).fit(fit)
                record(label, how, det, result, time.perf_counter() - tic,
                       time.process_time() - cpu_tic)
    report["loadavg_end"] = os.getloadavg()
    out_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print()
    print_tables(report)
    print(f"\nwrote {out_path}")


def published_rows() -> dict[tuple[str, str], float]:
    """(method, "ood_val" | "held_out") -> near-OOD AUROC of the published CSV."""
    import csv

    path = DATA / "leaderboards" / "imagenet1k_resnet50_tuning.csv"
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {(r["method"], "held_out" if r["tuning_method"].startswith("Proposed") else "ood_val"):
                float(r["near_ood_AUROC"]) for r in csv.DictReader(f)}


def held_rows(rows: list[dict[str, Any]], label: str, kind: str) -> list[dict[str, Any]]:
    """The held-out rows of one study label with ``retrain=kind``, one per seed, in file order."""
    return [r for r in rows if r["detector"] == label and r["protocol"].startswith(f"(b) {kind} seed ")]


def seed_spread(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(study label, "last_block" | "head") -> near and far AUROC in % over the held-out rows
    of that kind, each ``(mean, std)`` with ``std`` the sample standard deviation (ddof
    ``SPREAD_DDOF``), and ``m_star``, the chosen M per row, in the rows' order."""
    out = {}
    for kind in ("last_block", "head"):
        for label in STUDY:
            held = held_rows(report["rows"], label, kind)
            if not held:
                continue
            entry: dict[str, Any] = {"m_star": [r["tuning"]["m_star"] for r in held]}
            for group in ("near", "far"):
                values = 100 * np.array([r[f"{group}_auroc"] for r in held])
                std = float(values.std(ddof=SPREAD_DDOF)) if len(values) > SPREAD_DDOF else float("nan")
                entry[group] = (float(values.mean()), std)
            out[(label, kind)] = entry
    return out


def print_tables(report: dict[str, Any]) -> None:
    rows = report["rows"]
    published = published_rows()
    print("leaderboard shape: near / far AUROC [DeLong 95 %] and ID accuracy, in %; published: "
          "ImageNet-1K ResNet-50 (arXiv 2602.05935, Table 3 / the CSV)")
    header = f"{'method':<6} {'tuning':<24} {'near AUROC':>22} {'far AUROC':>22} {'ID acc':>7}   published near / far"
    print(header + "\n" + "-" * len(header))
    for label in STUDY:
        for r in (r for r in rows if r["detector"] == label):
            kind = "ood_val" if r["protocol"].startswith("(a)") else (
                "held_out" if r["protocol"] == "(b) last_block seed 0" else None)
            pub = (f"{published.get((label, kind), float('nan')):.2f} / {PUBLISHED_FAR[(label, kind)]:.2f}"
                   if kind else "")
            near, far = (f"{100 * r[g + '_auroc']:.2f} [{100 * r[g + '_ci'][0]:.1f}, {100 * r[g + '_ci'][1]:.1f}]"
                         for g in ("near", "far"))
            print(f"{label:<6} {r['protocol']:<24} {near:>22} {far:>22} {100 * r['id_accuracy']:>7.2f}   {pub}")
    print(f"(published ID accuracy {PUBLISHED_ID_ACC} for every row; PLF is oodbench's reading, "
          "see plf.py)")
    spreads = seed_spread(report)
    for kind in ("last_block", "head"):
        print(f"\nheld-out ({kind}) over seeds: mean +- sample std (ddof {SPREAD_DDOF}) of near / "
              "far AUROC, M* and phi per seed")
        for label in STUDY:
            if (label, kind) not in spreads:
                continue
            spread = spreads[(label, kind)]
            (near, near_std), (far, far_std) = spread["near"], spread["far"]
            print(f"  {label:<6} near {near:.2f}+-{near_std:.2f}  far {far:.2f}+-{far_std:.2f}  "
                  f"M* {spread['m_star']}")
            for r in held_rows(rows, label, kind):
                shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in r["tuning"]["best_params"].items())
                print(f"      seed {r['tuning']['seed']}: {shown}")


if __name__ == "__main__":
    main()
