"""The fidelity table: every detector under ``preset="openood"`` (and the C-OOD presets) against
a re-statement of the reference computation (``tests/oracles/protocol_reference.py``) on the
same activations. A test-side run (it uses the tests' synthetic activations and reference data),
from the repository root:

    .venv/bin/python -m tests.oracles.protocol_parity            # real Lite0 activations + synthetic 2048-d
    .venv/bin/python -m tests.oracles.protocol_parity --quick    # 300 ImageNet, 300 CIFAR-10 images

Data: (1) EfficientNet-Lite0 (real ImageNet weights) on the 1,300 ImageNet validation images of
``../shared/data/imagenet-val-1300``, split with a seed into train (half: the statistics fitted
on ``"train"``), ID-val (a quarter: those fitted on ``"id_val"``) and ID test (a quarter), against
1,000 CIFAR-10 test images as OOD; (2) synthetic 2048-d post-ReLU features of 100 classes with a
linear head (3,000 train, 1,000 ID-val, 1,000 ID test, 1,000 OOD rows; more training rows than
dimensions, so every covariance has full rank). Each detector is fitted by oodbench under the
preset and by the re-statement on the same arrays and scores the same ID-test + OOD rows.

Columns: max relative difference ``max_i |ours_i - ref_i| / max(|ref_i|, 1e-6 max_j |ref_j|)``,
the Spearman rank correlation, and ``match``: ``yes`` when the relative difference is <= 1e-5
or the rank correlation is 1.0 to 1e-8 (float32 head products can swap near-ties), ``NO`` otherwise; every row's note says why a
reference differs when it does. Live-network detectors (ODIN) run on a few images per side;
MC-dropout runs on a small random timm ViT (the C-OOD ``vit_drop_rate`` sites).

Prints the table and writes ``studies/results/protocol_parity.json`` (``_quick`` with --quick).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.stats
import torch

from oodbench.detectors import create
from oodbench.detectors.presets import preset_for, unavailable_reason
from oodbench.extract.activations import Activations
from tests.oracles import protocol_reference as ref
from tests.oracles.real_data import DATA, REPO, extract_all, sources

RESULTS = REPO / "studies" / "results"
#: a match: relative difference at most this, or rank correlation at least 1 - RANK_TOL
REL_TOL, RANK_TOL = 1e-5, 1e-8


@dataclass(eq=False)
class Split:
    """The activations both sides see: fit roles and the scored rows (ID test, then OOD)."""

    name: str
    train: Activations
    id_val: Activations
    id_test: Activations
    ood: Activations

    @functools.cached_property
    def test(self) -> Activations:
        return Activations.concatenate([self.id_test, self.ood])


def _arrays(acts: Activations) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    assert acts.features is not None and acts.head_weight is not None and acts.head_bias is not None
    return acts.features, acts.logits, acts.head_weight, acts.head_bias


Reference = Callable[[Split], np.ndarray]


@dataclass(frozen=True)
class Case:
    """One comparison: oodbench's ``create(detector, preset=protocol, **extra)`` against
    ``reference`` on a split; ``note`` says how the reference differs, if it does."""

    detector: str
    protocol: str
    reference: Reference
    extra: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    variant: str = ""  # names a second re-statement of the same reference
    details: Callable[[Split, Any], dict[str, Any]] | None = None  # extra numbers for the row


def _tr(s: Split) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return _arrays(s.train)


def openood_cases() -> list[Case]:
    """A case per detector with an OpenOOD v1.5 postprocessor (preset values as configured)."""
    hp = {name: dict(preset_for(name, "openood").hyperparams) for name in (
        "knn", "vim", "nnguide", "nci", "react", "dice", "ash_b", "scale", "vra", "gen", "energy", "mcm")}

    def test(s: Split) -> tuple[np.ndarray, np.ndarray]:
        f, z, _, _ = _arrays(s.test)
        return f, z

    def head(s: Split) -> tuple[np.ndarray, np.ndarray]:
        return _arrays(s.test)[2], _arrays(s.test)[3]

    nng_rows: Callable[[Split], np.ndarray] = lambda s: ref.openood_nnguide_bank_rows(  # noqa: E731
        len(s.train), hp["nnguide"]["fit_fraction"])
    return [
        Case("msp", "openood", lambda s: ref.openood_msp(test(s)[1])),
        Case("maxlogit", "openood", lambda s: ref.openood_mls(test(s)[1])),
        Case("energy", "openood", lambda s: ref.openood_ebo(test(s)[1], hp["energy"]["temperature"])),
        Case("gen", "openood", lambda s: ref.openood_gen(test(s)[1], hp["gen"]["gamma"], hp["gen"]["M"])),
        Case("temperature_scaling", "openood",
             lambda s: ref.openood_temp_scaling(s.id_val.logits, s.id_val.labels, test(s)[1]),
             note=preset_for("temperature_scaling", "openood").note,
             details=lambda s, det: {"T_oodbench": det.temperature_,
                                     "T_openood": ref.openood_temperature(s.id_val.logits, s.id_val.labels)}),
        Case("klm", "openood", lambda s: ref.openood_klm(s.id_val.logits, test(s)[1]),
             note=preset_for("klm", "openood").note),
        Case("mahalanobis", "openood", lambda s: ref.openood_mds(_tr(s)[0], s.train.labels, test(s)[0]),
             note=preset_for("mahalanobis", "openood").note),
        Case("rmd", "openood", lambda s: ref.openood_rmds(_tr(s)[0], s.train.labels, test(s)[0]),
             note=preset_for("rmd", "openood").note),
        # OpenOOD's value is the squared distance: compared as -sqrt(-value), oodbench's
        # -distance, so that values (not only ranks, which near-ties of float32 distances can
        # swap) must agree to REL_TOL
        Case("knn", "openood", lambda s: -np.sqrt(-ref.openood_knn(_tr(s)[0], test(s)[0], hp["knn"]["k"])),
             note=preset_for("knn", "openood").note + "; compared as -sqrt of OpenOOD's value"),
        Case("vim", "openood",
             lambda s: ref.openood_vim(_tr(s)[0], *head(s), test(s)[0], hp["vim"]["dim"]),
             note="np.linalg.eig, as OpenOOD: with fewer training rows than dimensions its "
                  "null-space eigenvectors are not orthonormal, so the residual is no projection"),
        Case("vim", "openood",
             lambda s: ref.openood_vim(_tr(s)[0], *head(s), test(s)[0], hp["vim"]["dim"], "eigh"),
             note="the same with the symmetric eigensolver (orthonormal eigenvectors)", variant="eigh"),
        Case("she", "openood",
             lambda s: ref.openood_she(_tr(s)[0], s.train.labels, _tr(s)[1], *test(s)),
             note=preset_for("she", "openood").note),
        Case("nnguide", "openood",
             lambda s: ref.openood_nnguide(_tr(s)[0], _tr(s)[1], *test(s), hp["nnguide"]["k"], nng_rows(s)),
             note=preset_for("nnguide", "openood").note),
        Case("nnguide", "openood", lambda s: ref.openood_nnguide(
                 _tr(s)[0], _tr(s)[1], *test(s), hp["nnguide"]["k"], np.arange(len(s.train))),
             extra={"fit_fraction": 1.0},
             note="the same bank on both sides (every training row): the scoring alone"),
        Case("fdbd", "openood", lambda s: ref.openood_fdbd(_tr(s)[0], head(s)[0], *test(s), True),
             note=preset_for("fdbd", "openood").note),
        Case("fdbd", "openood", lambda s: ref.openood_fdbd(_tr(s)[0], head(s)[0], *test(s), False),
             extra={"distance_to_mean": False}, note="OpenOOD's other swept value"),
        Case("nci", "openood", lambda s: ref.openood_nci(_tr(s)[0], head(s)[0], *test(s), hp["nci"]["alpha"])),
        Case("react", "openood", lambda s: ref.openood_react(
            _arrays(s.id_val)[0], *head(s), test(s)[0], hp["react"]["percentile"])),
        Case("dice", "openood", lambda s: ref.openood_dice(_tr(s)[0], *head(s), test(s)[0], hp["dice"]["sparsity"])),
        Case("ash_b", "openood", lambda s: ref.openood_ash(*head(s), test(s)[0], hp["ash_b"]["percentile"])),
        Case("scale", "openood", lambda s: ref.openood_scale(*head(s), test(s)[0], hp["scale"]["percentile"])),
        Case("vra", "openood", lambda s: ref.openood_vra(
            _arrays(s.id_val)[0], *head(s), test(s)[0], hp["vra"]["upper_percentile"],
            hp["vra"]["lower_percentile"])),
        Case("gradnorm", "openood", lambda s: ref.openood_gradnorm(*head(s), test(s)[0]),
             note=preset_for("gradnorm", "openood").note),
        Case("mcm", "openood", lambda s: ref.openood_mcm(head(s)[0], test(s)[0], hp["mcm"]["temperature"]),
             note="on a classifier's head read as class embeddings (the cosine view); OpenOOD runs it on CLIP"),
        Case("rankfeat", "paper", lambda s: ref.openood_rankfeat_block4(
                 *head(s), np.asarray(s.test.feature_map)),
             note=unavailable_reason("rankfeat", "openood") or ""),
    ]


def cood_logit_cases() -> list[Case]:
    """The C-OOD confidence functions computed from logits, under both C-OOD presets."""
    def z(s: Split) -> np.ndarray:
        return s.test.logits

    out = []
    for protocol in ("cood", "cood_code"):
        out += [
            Case("msp", protocol, lambda s: ref.cood_code_softmax(z(s))),
            Case("maxlogit", protocol, lambda s: ref.cood_code_max_logit(z(s))),
            Case("entropy", protocol, lambda s: ref.cood_code_entropy(z(s))),
        ]
    return out


def compare(ours: np.ndarray, reference: np.ndarray) -> dict[str, float | bool]:
    """Max relative difference (floored at 1e-6 of the largest |ref|), Spearman, match."""
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    floor = 1e-6 * float(np.abs(reference).max()) or 1e-300
    rel = float(np.max(np.abs(ours - reference) / np.maximum(np.abs(reference), floor)))
    rho = float(scipy.stats.spearmanr(ours, reference).statistic)
    return {"max_rel_diff": rel, "spearman": rho, "match": rel <= REL_TOL or rho >= 1 - RANK_TOL}


def run_case(case: Case, split: Split) -> dict[str, Any]:
    """Fit and score both sides on ``split``; never raises (an error becomes the row's note)."""
    row: dict[str, Any] = {"data": split.name, "detector": case.detector, "protocol": case.protocol,
                           "extra": case.extra, "variant": case.variant, "note": case.note}
    try:
        det = create(case.detector, preset=case.protocol, **case.extra)
        ours = det.fit(split.train, id_val=split.id_val).score(split.test)
        row.update(compare(ours, case.reference(split)), hyperparams=det.hyperparams)
        if case.details is not None:
            row.update(case.details(split, det))
    except Exception as err:  # a table run records a broken case and goes on
        row.update(match=False, error=f"{type(err).__name__}: {err}")
    return row


# -- data -------------------------------------------------------------------------------------
def synthetic_split(seed: int = 0, dim: int = 2048, classes: int = 100,
                    sizes: tuple[int, int, int, int] = (3000, 1000, 1000, 1000),
                    head_scale: float = 0.15, label_noise: float = 0.1) -> Split:
    """Post-ReLU features (2048-d) with a class structure and an aligned linear head, scaled by
    ``head_scale`` so that the softmax is not saturated (median max probability ~0.9), with a
    ``label_noise`` fraction of the ID labels replaced by another class (so that the model is
    wrong on some rows, as a real one is, and temperature scaling has a finite optimum). ``sizes``:
    train, ID-val, ID-test and OOD rows."""
    from tests.detectors.conftest import make_activations

    rng = np.random.default_rng([seed, 2048])
    parts = []
    for i, n in enumerate(sizes):
        acts = make_activations(n, classes, dim, seed=seed + i, ood=(i == 3))
        assert acts.features is not None and acts.head_weight is not None and acts.head_bias is not None
        weight = (acts.head_weight * head_scale).astype(np.float32)
        bias = (acts.head_bias * head_scale).astype(np.float32)
        logits = (acts.features.astype(np.float64) @ weight.T.astype(np.float64) + bias).astype(np.float32)
        labels = np.array(acts.labels)
        if i < 3:
            flip = rng.random(n) < label_noise
            labels[flip] = (labels[flip] + rng.integers(1, classes, flip.sum())) % classes
        parts.append(Activations(logits=logits, labels=labels, ids=acts.ids, features=acts.features,
                                 head_weight=weight, head_bias=bias, meta=acts.meta))
    return Split(f"synthetic {dim}-d", *parts)


def lite0_split(n_id: int | None, n_ood: int, seed: int, batch_size: int) -> tuple[Split, Any]:
    """Real EfficientNet-Lite0 activations (train / ID-val / ID test / CIFAR-10 OOD) and the model."""
    from oodbench import models

    model = models.load("efficientnet_lite0")
    id_source, ood_source = sources(DATA / "imagenet-val-1300", DATA / "cifar10-test", n_id, n_ood, seed)
    id_all = extract_all(model, id_source, batch_size, progress=True)
    ood = extract_all(model, ood_source, batch_size, progress=True)
    perm = np.random.default_rng([seed, len(id_all)]).permutation(len(id_all))
    half, three_quarters = len(perm) // 2, (3 * len(perm)) // 4
    parts = [id_all.subset(np.sort(p)) for p in (perm[:half], perm[half:three_quarters], perm[three_quarters:])]
    return Split("Lite0 ImageNet vs CIFAR-10", *parts, ood), model


# -- live-network cases ---------------------------------------------------------------------------
def odin_rows(model: Any, split: Split, n_live: int) -> list[dict[str, Any]]:
    """ODIN under ``openood`` (with OpenOOD's ImageNet std table) and ``cood_code`` on the first
    ``n_live`` ID-test and OOD images, against the re-statements on the same image tensors."""
    parts = [split.id_test.subset(np.arange(n_live)), split.ood.subset(np.arange(n_live))]
    images = torch.cat([
        torch.stack([model.transform(p.source.load(int(i))) for i in p.source_indices]) for p in parts
    ])
    rows = []
    model.eval()
    cases = [
        ("openood", {"input_std": ref.IMAGENET_STD, "device": "cpu"},
         lambda: ref.openood_odin(model, images, 1000.0, 0.0014, ref.IMAGENET_STD),
         "OpenOOD divides by its ImageNet std table whatever the model's normalisation, so the "
         "case passes that std"),
        ("cood_code", {"device": "cpu"}, lambda: ref.cood_code_odin(model, images, 2.0, 1e-5), ""),
    ]
    for protocol, extra, reference, note in cases:
        det = create("odin", preset=protocol, **extra).fit(None, model)
        ours = np.concatenate([det.score(p) for p in parts])
        rows.append({"data": f"Lite0, {n_live} + {n_live} images", "detector": "odin",
                     "protocol": protocol, "extra": {k: v for k, v in extra.items() if k != "device"},
                     "note": note, "hyperparams": det.hyperparams, **compare(ours, reference())})
    return rows


def mc_dropout_row(seed: int = 0) -> dict[str, Any]:
    """MC-dropout ``cood`` on a small random timm ViT (p = 0 dropout modules, ``vit_drop_rate``
    0.1) against the C-OOD code's entropy of the mean softmax of 30 passes of the same ViT built
    with timm 1.x's ``pos_drop_rate = proj_drop_rate = 0.1`` (old timm's ``drop_rate = 0.1``),
    with the same dropout masks (the same seeds per batch)."""
    from tests.detectors._shaping_fixtures import tiny_vit_setup

    model, acts, reference_model, images = tiny_vit_setup(seed)
    det = create("mc_dropout", preset="cood", batch_size=len(images), device="cpu").fit(None, model)
    ours = det.score(acts)
    torch.manual_seed(int(np.random.SeedSequence([det.seed, 0]).generate_state(1)[0]))
    reference_model.eval()
    for m in reference_model.modules():  # the C-OOD code's enable_dropout
        if m.__class__.__name__.startswith("Dropout"):
            m.train()
    with torch.no_grad():
        passes = torch.stack([torch.softmax(reference_model(images).double(), dim=1) for _ in range(30)])
    return {"data": f"random timm ViT, {len(images)} images", "detector": "mc_dropout",
            "protocol": "cood", "extra": {}, "hyperparams": det.hyperparams,
            "note": "old timm's drop_rate sites (pos_drop, attn.proj_drop, mlp drops), see mcdropout.py",
            **compare(ours, ref.cood_code_mcd_entropy(passes))}


def mos_row(seed: int = 0) -> dict[str, Any]:
    """MOS under ``preset="openood"`` on random group-softmax logits (3 groups of 4, 3 and 5
    classes: 15 outputs), against OpenOOD's ``cal_ood_score``."""
    groups = [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9, 10, 11]]
    logits = np.random.default_rng(seed).normal(0.0, 3.0, size=(500, 15)).astype(np.float32)
    acts = Activations(logits=logits, labels=np.full(500, -1), ids=np.arange(500).astype(str))
    det = create("mos", preset="openood", groups=groups)
    ours = det.fit(None).score(acts)
    return {"data": "random group-softmax logits", "detector": "mos", "protocol": "openood",
            "extra": {}, "hyperparams": det.hyperparams, "note": "",
            **compare(ours, ref.openood_mos(logits, [len(g) for g in groups]))}


# -- report -------------------------------------------------------------------------------------
def print_table(rows: list[dict[str, Any]]) -> None:
    header = f"{'data':<28} {'detector':<20} {'preset':<10} {'max rel diff':>12} {'Spearman':>10}  match  note"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        extra = ", ".join([f"{k}={v}" for k, v in r["extra"].items()] + ([r["variant"]] if r.get("variant") else []))
        label = r["detector"] + (f" ({extra})" if extra else "")
        if "error" in r:
            print(f"{r['data']:<28} {label:<20} {r['protocol']:<10} {'ERROR':>12} {'':>10}  NO     {r['error']}")
            continue
        details = "".join(f" ({k} = {r[k]:.4f})" for k in ("T_oodbench", "T_openood") if k in r)
        print(f"{r['data']:<28} {label:<20} {r['protocol']:<10} {r['max_rel_diff']:>12.2e} "
              f"{r['spearman']:>10.6f}  {'yes' if r['match'] else 'NO':<5}  {r['note']}{details}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 ImageNet and 300 CIFAR-10 images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-live", type=int, default=16, help="images per side for ODIN")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    n_id, n_ood = (300, 300) if args.quick else (None, 1000)
    out_path = RESULTS / f"protocol_parity{'_quick' if args.quick else ''}.json"

    tic = time.perf_counter()
    real, model = lite0_split(n_id, n_ood, args.seed, args.batch_size)
    splits = [real, synthetic_split(args.seed)]
    rows = []
    for split in splits:
        for case in openood_cases() + cood_logit_cases():
            if case.detector == "rankfeat" and split.test.feature_map is None:
                continue  # synthetic features have no feature map
            rows.append(run_case(case, split))
            print(f"  {split.name}: {case.detector} [{case.protocol}] "
                  f"{'ok' if rows[-1].get('match') else 'NO'}", flush=True)
    rows += odin_rows(model, real, args.n_live)
    rows.append(mc_dropout_row(args.seed))
    rows.append(mos_row(args.seed))
    print()
    print_table(rows)
    report = {
        "sizes": {s.name: {"train": len(s.train), "id_val": len(s.id_val), "id_test": len(s.id_test),
                           "ood": len(s.ood)} for s in splits},
        "openood_commit": "3c35632ee91b54b09d1f085d04f94744cece7d0b",
        "cood_code_commit": "8964aadfaa5172fb80ca26ab418c6ede914f2d53",
        "seconds": time.perf_counter() - tic, "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(), "rows": rows,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main()
