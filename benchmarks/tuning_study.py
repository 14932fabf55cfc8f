"""Tuning study: ASH, ReAct, VRA, KNN and PLF on EfficientNet-Lite0 (real ImageNet weights),
each (a) tuned on an OOD validation set (OpenOOD's protocol), (b) tuned without OOD data by the
held-out-class protocol (Mondal et al., arXiv 2602.05935) with ``retrain="head"``, (c) left at
its defaults; all evaluated on OOD sets that neither tuning saw.

    .venv/bin/python benchmarks/tuning_study.py                 # 5 held-out seeds, 40 TPE trials
    .venv/bin/python benchmarks/tuning_study.py --quick         # 2 seeds, 12 trials

Data (``../shared/data``): the 1,300 ImageNet validation images (725 classes) are ID and 1,000
CIFAR-10 test images (100 per class, seeded) are OOD; one forward pass each through
``oodbench.extract`` (logits and features, cached under ``oodbench.config.cache_dir()``).

* ID split. ``split_halves`` of ``real_detectors.py`` (same seed -> the same halves): the *test*
  half (650 images) is only used for the final evaluation. The *tuning* half is split by class
  (``oodbench.tune.split.split_by_class``): for every class with two or more images in it, one
  random image goes to ``id_val``, the rest to ``fit``; classes with one image go to ``fit``. So every ``id_val`` class also occurs in
  ``fit``: a held-out variant trained on a class has seen one of its images, and its other
  image is a fair simulated-ID sample. ``fit`` is what detectors fit on (ReAct's and VRA/PLF's
  percentiles, the KNN bank) in every protocol and what the held-out variants' heads train on.
* OOD groups. The ten CIFAR-10 classes are ranked by the model's mean maximum softmax on them
  (the C-OOD paper's notion of severity: the more confident the model is on an OOD class, the
  harder it is to detect). The two middle classes are the OOD validation set of (a); the four
  most confident are "near", the four least confident "far". Near/far AUROC is the mean of the
  per-class AUROCs of the group (as OpenOOD averages over the datasets of a group).
* Search. The same space and search for (a) and (b), so that only the protocol differs: grids for
  the one-parameter detectors (ASH-S's percentile: OpenOOD's ``ash.yml`` sweep), Optuna TPE with
  ``--n-trials`` trials for VRA and PLF (three continuous hyper-parameters each). Criterion: AUROC
  (mean over the variants for (b)). Held-out protocol: 5 variants, 20 % of the fit classes
  withheld, a new linear head per variant (``oodbench.train.train_head`` defaults); run once per
  ``--seeds`` value to show how much the choice varies.
* Proxy fidelity: for every point a search tried, the test near/far AUROC is computed too, and
  the Spearman correlation between the protocol's criterion and the test AUROC over those
  points says how well the criterion ranks hyper-parameters (the choice itself is unaffected).
* ID accuracy: top-1 of the logits the detector's shaping produces (``detector.shape``: ReAct,
  ASH, VRA, PLF change the features and so the predictions), of the model's own logits for KNN.

Prints the leaderboard-shaped table (near / far AUROC, ID accuracy per protocol) and the
spread of the held-out choice over seeds, and writes ``benchmarks/results/tuning_study.json``.
Nothing here is tuned toward published numbers: the spaces are fixed above, before any result.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from oodbench import metrics, models
from oodbench.data import ImageFolder
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.detectors import Detector, create
from oodbench.extract import extract
from oodbench.extract.activations import Activations
from oodbench.tune import Range, TuneResult, tune
from oodbench.tune.split import split_by_class

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_detectors import split_halves  # noqa: E402 - the sibling benchmark's split

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"
MODEL = "efficientnet_lite0"
PER_CIFAR_CLASS = 100

#: detector -> (registry name, search, space); the same for both tuning protocols
STUDY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "ASH": ("ash_s", "grid", {"percentile": [65.0, 70.0, 75.0, 80.0, 85.0, 90.0, 95.0]}),
    "ReAct": ("react", "grid", {"percentile": [80.0, 85.0, 90.0, 95.0, 99.0]}),
    "VRA": ("vra", "tpe", {"lower_percentile": Range(0.0, 70.0),
                           "upper_percentile": Range(70.0, 99.9), "gamma": Range(0.0, 1.0)}),
    "KNN": ("knn", "grid", {"k": [1, 2, 3, 5, 10, 20, 50]}),
    "PLF": ("plf_fold", "tpe", {"lower_percentile": Range(0.0, 70.0),
                           "upper_percentile": Range(70.0, 99.9), "slope": Range(0.0, 5.0)}),
}
HELD_OUT = {"n_variants": 5, "held_out_fraction": 0.2, "retrain": "head"}


def load_data(data: Path, batch_size: int) -> tuple[Activations, Activations, list[str]]:
    """(ID activations of the 1,300 ImageNet images, OOD activations of 100 seeded CIFAR-10 test
    images per class, the CIFAR class names)."""
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
    return id_all, ood, list(cifar.class_names)


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
    """Near/far AUROC (mean of per-class AUROCs), FPR@95 likewise, ID accuracy."""
    id_scores = det.score(id_test)
    ood_scores = det.score(ood)
    labels = np.asarray(ood.labels)
    out: dict[str, Any] = {"id_accuracy": shaped_accuracy(det, id_test)}
    for group in ("near", "far", "val"):
        per_class = [metrics.evaluate(id_scores, ood_scores[labels == c]) for c in groups[group]]
        out[f"{group}_auroc"] = float(np.mean([m["auroc"] for m in per_class]))
        out[f"{group}_fpr95_ood"] = float(np.mean([m["fpr95_ood"] for m in per_class]))
    return out


class TestAurocs:
    """Near/far test AUROC of any point of a detector's space (memoised): to measure how well a
    protocol's criterion ranks the points it tried (Spearman rho against the test AUROC)."""

    def __init__(self, fit: Activations, id_test: Activations, ood: Activations,
                 groups: dict[str, list[int]]):
        self.fit, self.id_test, self.ood, self.groups = fit, id_test, ood, groups
        self._memo: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str, point: dict[str, Any]) -> dict[str, Any]:
        params = {k: v for k, v in point.items() if k != "held_out_fraction"}
        key = json.dumps([name, params], sort_keys=True)
        if key not in self._memo:
            det = create(name, **params).fit(self.fit)
            self._memo[key] = evaluate_detector(det, self.id_test, self.ood, self.groups)
        return self._memo[key]

    def fidelity(self, name: str, result: TuneResult, space: dict[str, Any]) -> dict[str, Any]:
        table = result.table
        ok = table[table["status"] == "ok"] if "status" in table else table  # TPE: invalid points
        crit = ok[result.criterion].to_numpy(dtype=float)
        tests = [self(name, {k: row[k] for k in space}) for _, row in ok.iterrows()]
        out: dict[str, Any] = {"points": len(ok)}
        for group in ("near", "far"):
            values = np.array([t[f"{group}_auroc"] for t in tests])
            rho = spearmanr(crit, values).statistic if np.ptp(crit) > 0 and np.ptp(values) > 0 else float("nan")
            out[f"spearman_{group}"] = float(rho)
            out[f"best_possible_{group}"] = float(values.max())
        return out


def run_one(label: str, det: Detector, how: str, result: TuneResult | None, id_test: Activations,
            ood: Activations, groups: dict[str, list[int]], seconds: float,
            tests: TestAurocs | None = None, space: dict[str, Any] | None = None) -> dict[str, Any]:
    row = {"detector": label, "protocol": how, "hyperparams": det.hyperparams,
           "tuning": None if result is None else json.loads(result.tuning_record()),
           "tune_s": seconds, **evaluate_detector(det, id_test, ood, groups)}
    if result is not None and tests is not None and space is not None:
        row["fidelity"] = tests.fidelity(det.name, result, space)
        row["criterion_at_choice"] = result.best_value
    print(f"  {label:<6} {how:<22} near {row['near_auroc']:.4f}  far {row['far_auroc']:.4f}  "
          f"acc {row['id_accuracy']:.4f}  {fmt_params(det.hyperparams, result)}  ({seconds:.1f} s)",
          flush=True)
    return row


def fmt_params(params: dict[str, Any], result: TuneResult | None) -> str:
    keys = result.best_params if result is not None else params
    return ", ".join(f"{k}={params[k]:.4g}" if isinstance(params[k], float) else f"{k}={params[k]}"
                     for k in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="held-out protocol seeds")
    parser.add_argument("--n-trials", type=int, default=40, help="TPE trials (VRA, PLF)")
    parser.add_argument("--quick", action="store_true", help="seeds 0,1 and 12 TPE trials")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    seeds = [0, 1] if args.quick else [int(s) for s in args.seeds.split(",")]
    n_trials = 12 if args.quick else args.n_trials
    out_path = args.out or RESULTS / f"tuning_study{'_quick' if args.quick else ''}.json"

    id_all, ood_all, names = load_data(args.data, args.batch_size)
    tuning_rows, test_rows = split_halves(len(id_all), args.split_seed)
    tuning, id_test = id_all.subset(tuning_rows), id_all.subset(test_rows)
    fit_rows, val_rows = split_by_class(tuning.labels, args.split_seed)
    fit, id_val = tuning.subset(fit_rows), tuning.subset(val_rows)
    groups = severity_groups(ood_all, names)
    ood_labels = np.asarray(ood_all.labels)
    ood_val = ood_all.subset(np.flatnonzero(np.isin(ood_labels, groups["val"])))
    report: dict[str, Any] = {
        "model": MODEL, "n_fit": len(fit), "n_id_val": len(id_val), "n_id_test": len(id_test),
        "fit_classes": int(np.unique(fit.labels).size), "id_val_classes": int(np.unique(id_val.labels).size),
        "model_top1_id_test": float(np.mean(id_test.correct)),
        "ood_groups": {g: [names[c] for c in cs] for g, cs in groups.items()},
        "n_ood": {g: int(np.isin(ood_labels, cs).sum()) for g, cs in groups.items()},
        "held_out": HELD_OUT, "seeds": seeds, "n_trials": n_trials,
        "spaces": {k: {"detector": v[0], "search": v[1], "space": {p: repr(d) for p, d in v[2].items()}}
                   for k, v in STUDY.items()},
        "torch_threads": torch.get_num_threads(), "platform": platform.platform(), "rows": [],
    }
    print(f"{MODEL}: fit {len(fit)} ({report['fit_classes']} classes), id_val {len(id_val)}, ID test "
          f"{len(id_test)} (top-1 {report['model_top1_id_test']:.4f}); OOD groups "
          f"{report['ood_groups']}", flush=True)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tests = TestAurocs(fit, id_test, ood_all, groups)
    for label, (name, search, space) in STUDY.items():
        options: dict[str, Any] = {"search": search}
        if search == "tpe":
            options["n_trials"] = n_trials
        tic = time.perf_counter()
        a = tune(name, space, id_val, ood_val, fit=fit, **options)
        report["rows"].append(run_one(label, a.detector, "(a) OOD-val", a, id_test, ood_all,
                                      groups, time.perf_counter() - tic, tests, space))
        for seed in seeds:
            tic = time.perf_counter()
            extra = {"seed": seed} if search == "tpe" else {}
            b = tune(name, space, id_val, None, fit=fit, protocol="held_out_classes",
                     held_out={**HELD_OUT, "seed": seed}, **options, **extra)
            row = run_one(label, b.detector, f"(b) held-out seed {seed}", b, id_test, ood_all,
                          groups, time.perf_counter() - tic, tests, space)
            row["held_out_loss"] = b.best_value
            row["variant_id_accuracy"] = float(b.table.loc[b.table["best"], "id_accuracy"].iloc[0])
            report["rows"].append(row)
        report["rows"].append(run_one(label, create(name).fit(fit), "(c) defaults", None, id_test,
                                      ood_all, groups, 0.0))
        out_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print()
    print_tables(report)
    print(f"\nwrote {out_path}")


def print_tables(report: dict[str, Any]) -> None:
    rows = report["rows"]
    header = f"{'method':<7} {'tuning':<26} {'near AUROC':>10} {'far AUROC':>10} {'ID acc':>7}"
    print(header + "\n" + "-" * len(header))
    for label in STUDY:
        mine = [r for r in rows if r["detector"] == label]
        held = [r for r in mine if r["protocol"].startswith("(b)")]
        for r in mine:
            if r["protocol"].startswith("(b)"):
                continue
            print(f"{label:<7} {r['protocol']:<26} {100 * r['near_auroc']:>10.2f} "
                  f"{100 * r['far_auroc']:>10.2f} {100 * r['id_accuracy']:>7.2f}")
            if r["protocol"].startswith("(a)") and held:
                near = 100 * np.array([h["near_auroc"] for h in held])
                far = 100 * np.array([h["far_auroc"] for h in held])
                acc = 100 * np.array([h["id_accuracy"] for h in held])
                print(f"{label:<7} {'(b) held-out, ' + str(len(held)) + ' seeds':<26} "
                      f"{near.mean():>6.2f}±{near.std():<3.2f} {far.mean():>6.2f}±{far.std():<3.2f} "
                      f"{acc.mean():>7.2f}")
    print("\nhow well each protocol's criterion ranks the points it tried: Spearman rho against "
          "the test near / far AUROC of those points (best test AUROC among them)")
    for r in rows:
        if "fidelity" in r:
            f = r["fidelity"]
            print(f"  {r['detector']:<6} {r['protocol']:<22} {f['points']:>3} points  rho "
                  f"{f['spearman_near']:+.2f} / {f['spearman_far']:+.2f}  (best "
                  f"{100 * f['best_possible_near']:.2f} / {100 * f['best_possible_far']:.2f})")
    print("\nheld-out choice per seed (hyper-parameters; near / far AUROC on the test groups)")
    for label in STUDY:
        for r in rows:
            if r["detector"] == label and r["protocol"].startswith("(b)"):
                params = r["tuning"]["best_params"]
                shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in params.items())
                print(f"  {label:<6} seed {r['tuning']['seed']}: {shown:<60} "
                      f"{100 * r['near_auroc']:.2f} / {100 * r['far_auroc']:.2f}")


if __name__ == "__main__":
    main()
