"""Every registered detector on real activations: EfficientNet-Lite0 (real ImageNet weights) on
real ImageNet validation images (ID) against CIFAR-10 test images (far OOD).

    .venv/bin/python studies/real_detectors.py              # 1,300 ID (650 fit / 650 test), 1,000 OOD
    .venv/bin/python studies/real_detectors.py --quick      # 200 ID, 200 OOD
    .venv/bin/python studies/real_detectors.py --n-ood 500 --seed 1

Data (``../shared/data``, see its README): ``imagenet-val-1300`` (1,300 ILSVRC-2012 val images,
725 classes) is split with ``--seed`` into a *fit* half (training statistics: class means, the
KNN bank, ...) and a *test* half; the OOD set is a seeded subset of ``--n-ood`` CIFAR-10 test
images (32 px, upsampled by the model's transform; their CIFAR labels are carried but never used).
Each source is extracted once through ``oodbench.extract.extract`` (logits, features and the
1280x7x7 feature map in float16; cached under ``oodbench.config.cache_dir()``).

Small-sample caveats (the fit half has ~1-2 images per class):
* Mahalanobis / RMD: the tied covariance comes only from classes with two or more fit images
  (rank << 1280) and is pseudo-inverted; means of 1-2 images are noisy.
* SHE: classes without a correctly classified fit image get a zero pattern (a warning, recorded).
* KNN and NNGuide: ``k`` is scaled with the bank as the papers do (KNN: k = 1000 for the full
  1.28M-image ImageNet bank, 10 for 1 %; NNGuide: k = 10 for a 1 % bank), which gives k = 1 here.
* ViM: the principal dimension must stay below the rank of the fit covariance (<= n_fit), else
  the fit residuals vanish and alpha blows up; we use min(paper default, n_fit // 2).
Every other detector runs with its defaults; the fit half serves both fit roles (``"train"`` and
``"id_val"``: the model never trained on these validation images, so for temperature scaling
and KL-matching it is the held-out data their papers fit on). ODIN runs with the ODIN paper's
preset and both C-OOD ones (``cood``: as the paper describes it, ``cood_code``: as its code
computes it). MC-dropout, MOS (needs a group-softmax head) and CLIP-only detectors (text
embeddings) are reported as not applicable with the reason. Metrics:
``oodbench.metrics.evaluate`` (ID positive; FPR@95 both conventions).

Prints a table sorted by AUROC and writes ``studies/results/real_detectors.json``
(``real_detectors_quick.json`` with ``--quick``), rewritten after every detector.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import models
from oodbench.data import ImageFolder
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.data.source import Source
from oodbench.detectors import Detector, available, create
from oodbench.detectors.vim import default_principal_dim
from oodbench.errors import OodbenchError
from oodbench.extract import extract
from oodbench.extract.activations import Activations
from oodbench.metrics import accuracy, evaluate

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "efficientnet_lite0"
CAPTURE = ("logits", "features", "feature_map")
#: (k at the reference bank size, reference bank size): the papers' ImageNet settings
K_REFERENCE = {"knn": (1000, 1_281_167), "nnguide": (10, 12_811)}
#: options that change speed or memory, not the scores (left out of the printed table)
RUN_OPTIONS = ("batch_size", "device")


@dataclass
class Outcome:
    """One detector's run: status ``ok`` / ``not applicable`` / ``error``, scores, metrics."""

    label: str
    hyperparams: dict[str, Any]
    status: str = "ok"
    reason: str = ""
    id_scores: np.ndarray | None = None
    ood_scores: np.ndarray | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    fit_s: float = float("nan")
    score_s: float = float("nan")
    warnings: list[str] = field(default_factory=list)

    @property
    def finite(self) -> bool:
        return all(s is not None and bool(np.isfinite(s).all()) for s in (self.id_scores, self.ood_scores))

    def to_json(self) -> dict[str, Any]:
        n_bad = sum(int((~np.isfinite(s)).sum()) for s in (self.id_scores, self.ood_scores) if s is not None)
        return {
            "detector": self.label, "hyperparams": self.hyperparams, "status": self.status,
            "reason": self.reason, **self.metrics, "fit_s": self.fit_s, "score_s": self.score_s,
            "finite": self.finite if self.status == "ok" else None, "non_finite_scores": n_bad,
            "warnings": self.warnings,
        }


def sources(id_root: Path, ood_root: Path, n_id: int | None, n_ood: int, seed: int) -> tuple[Source, Source]:
    """The ImageNet val images of ``id_root`` (all, or a seeded subset of ``n_id``) and a seeded
    subset of ``n_ood`` CIFAR-10 test images of ``ood_root``, both in source order."""
    rng = np.random.default_rng(seed)
    id_source: Source = ImageNetVal(id_root)
    if n_id is not None and n_id < len(id_source):
        id_source = id_source.subset(np.sort(rng.choice(len(id_source), n_id, replace=False)))
    ood_source = ImageFolder(ood_root, name="cifar10-test")
    return id_source, ood_source.subset(np.sort(rng.choice(len(ood_source), n_ood, replace=False)))


def split_halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (fit, test) row indices: a random half (rounded down) and the rest, each sorted."""
    perm = np.random.default_rng([seed, n]).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2 :])


def extract_all(model: Any, source: Source, batch_size: int, progress: bool) -> Activations:
    return extract(model, source, capture=CAPTURE, batch_size=batch_size, progress=progress,
                   feature_map_dtype="float16")


def detector_plan(n_fit: int, feature_dim: int, batch_size: int) -> tuple[list[tuple[str, Detector]], dict[str, str]]:
    """(label, detector) for every registered detector that a plain classifier can run (ODIN once
    per preset), with the small-sample hyper-parameters of the module docstring; and
    {name: reason} for the skipped CLIP-text detectors."""
    sized: dict[str, dict[str, Any]] = {
        name: {"k": max(1, round(k * n_fit / bank))} for name, (k, bank) in K_REFERENCE.items()
    }
    sized["vim"] = {"dim": min(default_principal_dim(feature_dim), n_fit // 2)}
    plan: list[tuple[str, Detector]] = []
    skipped = {}
    for entry in available():
        name = entry["name"]
        if "text_embeddings" in entry["requires"]:
            skipped[name] = "not applicable: needs a CLIP text encoder (text_embeddings); Lite0 has none"
        elif name == "odin":
            plan += [(f"odin[{p}]", create(name, preset=p, batch_size=batch_size))
                     for p in ("paper", "cood", "cood_code")]
        else:
            live = {"batch_size": batch_size} if "model" in entry["requires"] else {}
            plan.append((name, create(name, **live, **sized.get(name, {}))))
    return plan, skipped


def run_detector(label: str, det: Detector, model: Any, fit: Activations, id_test: Activations,
                 ood: Activations) -> Outcome:
    """Fit on ``fit``, score ``id_test`` and ``ood``, evaluate. Never raises: an
    ``OodbenchError`` is recorded as "not applicable", any other exception as "error"."""
    out = Outcome(label, det.hyperparams)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tic = time.perf_counter()
            det.fit(fit, model, id_val=fit)
            out.fit_s = time.perf_counter() - tic
            tic = time.perf_counter()
            out.id_scores, out.ood_scores = det.score(id_test), det.score(ood)
            out.score_s = time.perf_counter() - tic
            out.metrics = evaluate(out.id_scores, out.ood_scores, id_correct=id_test.correct)
        except OodbenchError as err:
            out.status, out.reason = "not applicable", f"{type(err).__name__}: {err}"
        except Exception as err:  # a long run records a broken detector and goes on
            out.status, out.reason = "error", f"{type(err).__name__}: {err}"
    out.hyperparams = det.hyperparams  # after fit: presets and defaults resolved
    out.warnings = sorted({str(w.message) for w in caught})
    return out


def _jsonable(obj: Any) -> Any:
    """NaN -> null (strict JSON), recursively."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return None if isinstance(obj, float) and obj != obj else obj


def fmt(x: float, digits: int = 4) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def print_table(outcomes: list[Outcome], skipped: dict[str, str]) -> None:
    ok = sorted((o for o in outcomes if o.status == "ok"), key=lambda o: -o.metrics["auroc"])
    hps = {o.label: ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in o.hyperparams.items() if k not in RUN_OPTIONS and v is not None)
           for o in ok}
    width = max([len("hyperparams"), *map(len, hps.values())])
    header = (f"{'detector':<20} {'hyperparams':<{width}} {'AUROC':>7} {'FPR95-ID':>8} {'FPR95-OOD':>9} "
              f"{'AUPR-In':>7} {'fit s':>7} {'score s':>8}  finite")
    print(header + "\n" + "-" * len(header))
    for o in ok:
        m = o.metrics
        print(f"{o.label:<20} {hps[o.label]:<{width}} {fmt(m['auroc']):>7} {fmt(m['fpr95_id']):>8} "
              f"{fmt(m['fpr95_ood']):>9} {fmt(m['aupr_in']):>7} {fmt(o.fit_s, 2):>7} "
              f"{fmt(o.score_s, 2):>8}  {'yes' if o.finite else 'NO'}")
    for o in outcomes:
        if o.status != "ok":
            print(f"{o.label:<20} {o.status}: {o.reason}")
    for name, reason in skipped.items():
        print(f"{name:<20} skipped: {reason}")
    for o in outcomes:
        for w in o.warnings:
            print(f"warning [{o.label}]: {w}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ood", type=int, default=None, help="CIFAR-10 test images (default 1000, quick 200)")
    parser.add_argument("--n-id", type=int, default=None, help="ImageNet images (default all 1300, quick 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="200 ID and 200 OOD images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    n_id = args.n_id or (200 if args.quick else None)
    n_ood = args.n_ood or (200 if args.quick else 1000)
    out_path = args.out or RESULTS / f"real_detectors{'_quick' if args.quick else ''}.json"

    model = models.load(MODEL)
    id_root, ood_root = args.data / "imagenet-val-1300", args.data / "cifar10-test"
    id_source, ood_source = sources(id_root, ood_root, n_id, n_ood, args.seed)
    id_all = extract_all(model, id_source, args.batch_size, progress=True)
    ood = extract_all(model, ood_source, args.batch_size, progress=True)
    fit_rows, test_rows = split_halves(len(id_all), args.seed)
    fit, id_test = id_all.subset(fit_rows), id_all.subset(test_rows)
    top1 = accuracy(id_all.predictions, id_all.labels)
    fit_labels = np.asarray(fit.labels)
    per_class = np.bincount(fit_labels[fit_labels >= 0])
    assert id_all.features is not None
    plan, skipped = detector_plan(len(fit), id_all.features.shape[1], args.batch_size)
    report: dict[str, Any] = {
        "model": MODEL, "id": str(id_root), "ood": str(ood_root),
        "seed": args.seed, "quick": args.quick, "n_id": len(id_all), "n_fit": len(fit),
        "n_id_test": len(id_test), "n_ood": len(ood), "id_top1_accuracy": top1,
        "fit_classes": int((per_class > 0).sum()), "fit_classes_with_2plus": int((per_class >= 2).sum()),
        "extraction_s": {"id": id_all.meta["timings"], "ood": ood.meta["timings"]},
        "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
        "skipped": skipped, "detectors": [],
    }
    print(f"{MODEL}: top-1 accuracy {top1:.4f} on {len(id_all)} ImageNet val images; fit {len(fit)} "
          f"({report['fit_classes']} classes, {report['fit_classes_with_2plus']} with >= 2 images), "
          f"ID test {len(id_test)}, OOD {len(ood)}")
    outcomes = []
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for label, det in plan:
        outcomes.append(run_detector(label, det, model, fit, id_test, ood))
        o = outcomes[-1]
        print(f"  {label}: {o.status} {fmt(o.metrics.get('auroc', float('nan')))} "
              f"(fit {fmt(o.fit_s, 2)} s, score {fmt(o.score_s, 2)} s)", flush=True)
        report["detectors"] = [x.to_json() for x in outcomes]
        out_path.write_text(json.dumps(_jsonable(report), indent=1, default=str) + "\n")
    print()
    print_table(outcomes, skipped)
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main()
