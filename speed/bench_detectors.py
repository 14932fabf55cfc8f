"""Time ``fit`` and ``score`` of every registered detector on cached-size activations, next to
pytorch-ood 0.4.0's implementation on the same arrays.

    .venv/bin/python speed/bench_detectors.py            # full size (minutes to hours)
    .venv/bin/python speed/bench_detectors.py --quick    # every row count / 10
    .venv/bin/python speed/bench_detectors.py --only react,dice --budget 120  # update rows
    .venv/bin/python speed/bench_detectors.py --quick --repeat 3   # best of 3 per side
    .venv/bin/python speed/bench_detectors.py --quick --setting busy   # 2 spinning neighbours
    .venv/bin/python speed/bench_detectors.py --table    # the three settings side by side

Full size: 50,000 scored rows x 2,048 features, 1,000 classes, a 100,000-row training bank,
float32 (what the extraction cache holds for a ResNet-50 on ImageNet); feature-map detectors
(RankFeat) on 2,000 x 2,048 x 7 x 7 maps. ``--quick`` divides every row count by 10 (features,
classes and map sizes stay). The arrays are synthetic but shaped like real ones: non-negative
(post-ReLU) features with class structure and logits = features @ W.T + b of a linear head;
a fifth of the rows look like another class than their label, as a real model's mistakes.

Detectors that run the live network (ODIN, MC-dropout) or need a CLIP text encoder are listed
as skipped: their cost is forward/backward passes, not array maths. pytorch-ood is given the
same arrays as float32 tensors on the CPU, through its ``fit_*``/``predict_*`` methods with the
matching settings (percentiles as fractions, the paper's ImageNet values), scoring in batches of
``POOD_BATCH`` rows as an evaluation loop would (its DICE materialises a rows x C x D tensor, so
one call on 50,000 rows cannot run); where it has no counterpart the column is empty. Its ViM
computes the origin ``-pinv(W) b`` in its constructor, oodbench in ``fit``: that constructor is
timed as part of pytorch-ood's ViM fit. Each measurement has a time budget (``--budget``
seconds, enforced with SIGALRM between Python-level steps): a run over budget is reported as
such.

Three settings (``--setting``), each written to its own file
``speed/results/bench_detectors_<setting>.json``: ``one-thread`` (torch and every BLAS
limited to one thread), ``default`` (each library's own thread counts, nothing else started)
and ``busy`` (the default thread counts, with ``--neighbours`` processes spinning
``while True: pass`` beside the benchmark for its whole run, started and stopped by it, at its
own niceness: other work holding the cores, as DataLoader workers or a second job do).
``--table`` prints the three side by side from those files. This machine is shared, so
``default`` is not an idle machine either: each file records the load averages before and after
and per detector.

For the detectors of logits alone, pytorch-ood is timed both in batches and in one call on all
rows (its faster way when the logits are cached), and the better of the two is kept.

Prints a table and writes ``speed/results/bench_detectors.json`` (without ``--setting``). Timings are wall-clock
seconds of one run on this machine (``--clock cpu``: CPU seconds of this process; ``--repeat``:
the best of several), with the thread counts and the machine's load averages before and after
in the JSON; nothing here is a unit test. ``--threads 1`` limits torch and the BLAS of NumPy,
SciPy and faiss alike (without it a CPU-time measurement also counts the spinning of idle BLAS
threads).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oodbench import compute
from oodbench.detectors import available, create
from oodbench.extract.activations import Activations

RESULTS = Path(__file__).resolve().parent / "results" / "bench_detectors.json"
SETTINGS = ("one-thread", "default", "busy")
POOD_BATCH = 128
#: pytorch-ood detectors of logits alone: also timed in one call on every row
POOD_ONE_CALL = {"msp", "maxlogit", "entropy", "energy", "gen", "klm", "temperature_scaling"}
FULL = {"n_test": 50_000, "n_train": 100_000, "n_map": 2_000, "dim": 2048, "classes": 1000,
        "map_hw": 7}


# -- synthetic activations ------------------------------------------------------------------
def make_head(classes: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Sparse non-negative class prototypes and a linear head aligned with them (float32)."""
    protos = np.abs(rng.standard_normal((classes, dim), dtype=np.float32))
    protos *= rng.random((classes, dim), dtype=np.float32) < 0.3
    weight = 0.5 * rng.standard_normal((classes, dim), dtype=np.float32) / np.sqrt(dim)
    weight += 3.0 * (protos - protos.mean(axis=0)) / np.sqrt(dim)
    bias = (0.1 * rng.standard_normal(classes)).astype(np.float32)
    return protos, weight.astype(np.float32), bias


#: share of rows that look like another class than their label (what the model gets wrong: a
#: ResNet-50 misclassifies about 20 % of ImageNet's validation images)
MISLABELLED = 0.2


def make_acts(n: int, head: tuple[np.ndarray, ...], rng: np.random.Generator,
              map_hw: int | None = None) -> Activations:
    """``n`` rows: relu(1.5 * prototype + noise) features, head logits, optional feature map;
    a ``MISLABELLED`` share of them are drawn from another class's prototype than their label."""
    protos, weight, bias = head
    classes, dim = weight.shape
    labels = rng.integers(0, classes, n)
    looks_like = np.where(rng.random(n) < MISLABELLED, rng.integers(0, classes, n), labels)
    features = np.empty((n, dim), dtype=np.float32)
    logits = np.empty((n, classes), dtype=np.float32)
    fmap = None if map_hw is None else np.empty((n, dim, map_hw, map_hw), dtype=np.float32)
    for s in range(0, n, 4096):
        e = min(s + 4096, n)
        f = 1.5 * protos[looks_like[s:e]] + 0.6 * rng.standard_normal((e - s, dim), dtype=np.float32)
        features[s:e] = np.maximum(f, 0.0)
        logits[s:e] = features[s:e] @ weight.T + bias
        if fmap is not None:
            for r in range(s, e, 256):
                noise = rng.random((min(r + 256, e) - r, dim, map_hw, map_hw), dtype=np.float32)
                noise /= noise.mean(axis=(2, 3), keepdims=True)
                fmap[r : r + len(noise)] = features[r : r + len(noise), :, None, None] * noise
    return Activations(logits=logits, labels=labels, ids=np.arange(n).astype(str),
                       features=features, feature_map=fmap, head_weight=weight, head_bias=bias)


# -- timing -------------------------------------------------------------------------------
class OverBudget(Exception):
    pass


@contextmanager
def budget(seconds: float):
    """Raise ``OverBudget`` after ``seconds`` (checked between Python-level steps)."""

    def alarm(signum: int, frame: Any) -> None:
        raise OverBudget

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


#: the clock of the measurements: wall time, or (``--clock cpu``) the CPU time of this process,
#: steadier than wall time on a machine shared with other work
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def timed(run: Callable[[], tuple[Callable[[], Any], Callable[[], Any]]],
          seconds: float, repeat: int = 1) -> dict[str, Any]:
    """``run()`` returns (fit, score) callables; time each within one budget, the best of
    ``repeat`` runs (a fresh ``run()`` each time), so both libraries see the same machine load."""
    out: dict[str, Any] = {"status": "ok", "fit_s": None, "score_s": None, "repeat": repeat}
    try:
        with budget(seconds):
            for _ in range(repeat):
                fit, score = run()
                t0 = clock()
                fit()
                fit_s = clock() - t0
                t0 = clock()
                result = score()
                if isinstance(result, torch.Tensor):  # e.g. a learned temperature still in the graph
                    result = result.detach()
                scores = np.asarray(result, dtype=np.float64)
                score_s = clock() - t0
                out["fit_s"] = fit_s if out["fit_s"] is None else min(out["fit_s"], fit_s)
                out["score_s"] = score_s if out["score_s"] is None else min(out["score_s"], score_s)
            out["nonfinite"] = int((~np.isfinite(scores)).sum())
    except OverBudget:
        out["status"] = f"over budget ({seconds:g} s)"
    except Exception as err:  # one failing detector must not end the benchmark
        out["status"] = f"error: {type(err).__name__}: {err}"
        out["trace"] = traceback.format_exc(limit=3)
    return out


# -- the two sides -----------------------------------------------------------------------
#: options a detector needs on these arrays: MOS reads the 1,000 logits as a group-softmax
#: head of 8 groups of 124 classes, each with its "others" output (992 classes + 8)
OPTIONS: dict[str, dict[str, Any]] = {
    "mos": {"groups": [list(range(124 * g, 124 * (g + 1))) for g in range(8)]}}


def ours(name: str, train: Activations, test: Activations):
    det = create(name, **OPTIONS.get(name, {}))
    fit = train if det.fits_on_data else None  # one set for both fit roles: only time matters here
    return (lambda: det.fit(fit, id_val=fit)), (lambda: det.score(test))


POOD_SETTINGS = {  # our name -> (pytorch-ood class, what it eats)
    "msp": "MaxSoftmax", "maxlogit": "MaxLogit", "entropy": "Entropy", "energy": "EnergyBased",
    "gen": "GEN", "klm": "KLMatching", "temperature_scaling": "TemperatureScaling",
    "mahalanobis": "Mahalanobis", "rmd": "RMD", "knn": "KNN", "vim": "ViM", "she": "SHE",
    "nnguide": "NNGuide", "fdbd": "fDBD", "nci": "NCI", "dice": "DICE", "react": "ReAct",
    "ash_p": "ASH", "ash_b": "ASH", "ash_s": "ASH", "scale": "SCALE", "vra": "VRA",
    "rankfeat": "RankFeat", "gradnorm": "GradNorm",
}


def pytorch_ood(name: str, train: Activations, test: Activations, batch: int | None = POOD_BATCH):
    """(fit, score) closures of pytorch-ood's counterpart of ``name`` on the same arrays, scoring
    in batches of ``batch`` rows (``None``: one call on every row)."""
    import pytorch_ood.detector as P

    w, b = torch.from_numpy(test.head_weight), torch.from_numpy(test.head_bias)
    fc = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        fc.weight.copy_(w)
        fc.bias.copy_(b)
    fc.requires_grad_(False)
    zt, yt, lt = (torch.from_numpy(train.features), torch.from_numpy(train.labels),
                  torch.from_numpy(train.logits))
    z, logits = torch.from_numpy(test.features), torch.from_numpy(test.logits)

    def head(x: torch.Tensor) -> torch.Tensor:
        return fc(x.flatten(1)) if x.ndim == 4 else fc(x)

    step = batch or len(test)

    def batched(predict: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor):
        return lambda: torch.cat([predict(x[i : i + step]) for i in range(0, len(x), step)])

    nothing = lambda: None  # noqa: E731
    logit_dets = {"msp": lambda: P.MaxSoftmax(None), "maxlogit": lambda: P.MaxLogit(None),
                  "entropy": lambda: P.Entropy(None), "energy": lambda: P.EnergyBased(None),
                  "gen": lambda: P.GEN(None, gamma=0.1, M=100),
                  "klm": lambda: P.KLMatching(None),
                  "temperature_scaling": lambda: P.TemperatureScaling(None)}
    if name in logit_dets:
        det = logit_dets[name]()
        fit = (lambda: det.fit_logits(lt, yt)) if det.requires_fit else nothing
        return fit, batched(det.predict_logits, logits)
    if name == "vim":  # its constructor computes the origin u = -pinv(W) b: fit work (ours: in fit)
        fitted: list[Any] = []
        d = 1000 if w.shape[1] >= 1500 else 512
        return (lambda: fitted.append(P.ViM(None, d, w, b).fit_features(zt, yt)),
                batched(lambda x: fitted[-1].predict_features(x), z))
    feature_dets = {"mahalanobis": lambda: P.Mahalanobis(None), "rmd": lambda: P.RMD(None),
                    "knn": lambda: P.KNN(None, k=50),
                    "she": lambda: P.SHE(None, fc), "nnguide": lambda: P.NNGuide(None, fc, k=10),
                    "fdbd": lambda: P.fDBD(None, fc), "nci": lambda: P.NCI(None, fc, alpha=1e-4),
                    "dice": lambda: P.DICE(None, w, b, p=0.7)}
    if name in feature_dets:
        det = feature_dets[name]()
        return (lambda: det.fit_features(zt, yt)), batched(det.predict_features, z)
    as_map = z[:, :, None, None]
    identity = lambda x: x  # noqa: E731
    if name == "react":
        det = P.ReAct(identity, head, percentile=0.9)
        return (lambda: det.fit_feature_maps(zt, yt)), batched(det.predict_feature_maps, z)
    if name == "vra":
        det = P.VRA(identity, head, lower_percentile=0.6, upper_percentile=0.9)
        return (lambda: det.fit_feature_maps(zt[:, :, None, None], yt),
                batched(det.predict_feature_maps, as_map))
    if name.startswith("ash_"):
        pct = {"ash_p": 0.6, "ash_b": 0.65, "ash_s": 0.9}[name]
        det = P.ASH(identity, head, variant=name.replace("_", "-"), percentile=pct)
        return nothing, batched(det.predict_feature_maps, as_map)
    if name == "scale":
        det = P.SCALE(identity, head, percentile=0.85)
        return nothing, batched(det.predict_feature_maps, as_map)
    if name == "rankfeat":
        det = P.RankFeat(identity, lambda x: fc(x.mean(dim=(2, 3))))
        return nothing, batched(det.predict_feature_maps, torch.from_numpy(test.feature_map))
    if name == "gradnorm":
        det = P.GradNorm(fc.requires_grad_(True), param_filter=lambda n: n == "weight")
        return nothing, batched(det.predict, z)
    raise KeyError(name)


def better(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The faster of two timings of one side (fit + score), each recording its batching."""
    def total(t: dict[str, Any]) -> float:
        return t["fit_s"] + t["score_s"] if t["status"] == "ok" else float("inf")

    return a if total(a) <= total(b) else b


# -- busy neighbours ------------------------------------------------------------------------
#: a neighbour: spin for at most the given seconds (so none outlives a killed benchmark long)
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass"


@contextmanager
def busy_neighbours(count: int, seconds: float):
    """``count`` processes spinning beside this one (at its niceness) while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)])
             for _ in range(count)]
    try:
        time.sleep(1.0)  # let them start spinning
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


# -- main ---------------------------------------------------------------------------------
def fmt(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def setting_path(setting: str) -> Path:
    return RESULTS.with_name(f"bench_detectors_{setting.replace('-', '_')}.json")


def total_s(side: dict[str, Any] | None) -> str:
    """fit + score seconds of one side, or why there is none."""
    if not side:
        return ""
    if side.get("status") != "ok":
        return side.get("status", "")
    return f"{side['fit_s'] + side['score_s']:.3f}"


def settings_table() -> None:
    """The three settings' files as one markdown table: fit + score seconds per library."""
    runs = {s: json.loads(setting_path(s).read_text()) for s in SETTINGS if setting_path(s).exists()}
    if not runs:
        raise SystemExit(f"no results yet: run with --setting one of {SETTINGS}")
    header = " | ".join(f"{s}: oodbench | {s}: pytorch-ood" for s in runs)
    print(f"| detector | {header} |")
    print("|---|" + "---|" * (2 * len(runs)))
    by_setting = {s: {r["detector"]: r for r in run["rows"]} for s, run in runs.items()}
    for name in sorted({n for rows in by_setting.values() for n in rows}):
        cells = []
        for s in runs:
            row = by_setting[s].get(name, {})
            cells += [total_s(row.get("ours")), total_s(row.get("pytorch_ood"))]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for s, run in runs.items():
        m = run["machine"]
        print(f"{s}: torch threads {m['torch_threads']}, neighbours {run.get('neighbours', 0)}, "
              f"load before {m['load_average_1_5_15min_before']}, after "
              f"{m['load_average_1_5_15min_after']}")


def main() -> None:
    import sympy  # noqa: F401  (torch imports it lazily: a budget alarm inside that import would
    # leave it half-imported for every later measurement)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every row count / 10")
    parser.add_argument("--divide", type=int, default=None,
                        help="every row count / this (--quick is --divide 10)")
    parser.add_argument("--only", default="", help="comma-separated detector names")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds per measurement (default 900 full, 300 quick)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time each side this many times and keep the best (a loaded machine)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of torch and of the BLAS/OpenMP pools NumPy, SciPy and faiss "
                             "use (threadpoolctl); default: each library's own")
    parser.add_argument("--no-pytorch-ood", action="store_true")
    parser.add_argument("--setting", choices=SETTINGS, default=None,
                        help="one-thread (= --threads 1), default, or busy (default threads with "
                             "--neighbours spinning processes); writes bench_detectors_<setting>.json")
    parser.add_argument("--neighbours", type=int, default=os.cpu_count() or 1,
                        help="spinning processes beside the benchmark with --setting busy")
    parser.add_argument("--table", action="store_true",
                        help="print the three settings' results side by side and exit")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.table:
        settings_table()
        return
    if args.setting == "one-thread":
        args.threads = 1
    args.out = args.out or (setting_path(args.setting) if args.setting else RESULTS)
    neighbours = args.neighbours if args.setting == "busy" else 0

    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        import faiss  # noqa: F401  (loaded first, so that its BLAS is limited too)
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(args.threads)
        threadpool_limits(args.threads)  # in force for the rest of the process
    load_before = os.getloadavg()
    sizes = dict(FULL)
    divide = args.divide or (10 if args.quick else 1)
    sizes.update({k: sizes[k] // divide for k in ("n_test", "n_train", "n_map")})
    seconds = args.budget or (300.0 if divide > 1 else 900.0)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    head = make_head(sizes["classes"], sizes["dim"], rng)
    train = make_acts(sizes["n_train"], head, rng)
    test = make_acts(sizes["n_test"], head, rng)
    maps = make_acts(sizes["n_map"], head, rng, map_hw=sizes["map_hw"])
    print(f"generated arrays in {time.perf_counter() - t0:.1f} s: {sizes}", flush=True)

    wanted = {n for n in args.only.split(",") if n}
    rows: list[dict[str, Any]] = []
    with busy_neighbours(neighbours, seconds=4 * 3600):
        run_all(args, wanted, seconds, train, test, maps, rows)
    print_table(rows)
    write(args, wanted, sizes, seconds, load_before, neighbours, rows)


def run_all(args: argparse.Namespace, wanted: set[str], seconds: float, train: Activations,
            test: Activations, maps: Activations, rows: list[dict[str, Any]]) -> None:
    """Time every detector on both sides, appending one row each to ``rows``."""
    for info in available():
        name, needs = info["name"], set(info["requires"])
        if wanted and name not in wanted:
            continue
        row: dict[str, Any] = {"detector": name, "requires": sorted(needs),
                               "load_average_1min": os.getloadavg()[0]}
        if needs & {"model", "text_embeddings"}:
            row["ours"] = {"status": "skipped: runs the live network" if "model" in needs
                           else "skipped: needs a CLIP text encoder"}
            rows.append(row)
            continue
        scored = maps if "feature_map" in needs else test
        row["rows_scored"] = len(scored)
        row["ours"] = timed(lambda name=name, s=scored: ours(name, train, s), seconds, args.repeat)
        if name in POOD_SETTINGS and not args.no_pytorch_ood:
            theirs = {"batch": POOD_BATCH, **timed(
                lambda name=name, s=scored: pytorch_ood(name, train, s), seconds, args.repeat)}
            if name in POOD_ONE_CALL:
                theirs = better(theirs, {"batch": "all rows", **timed(
                    lambda name=name, s=scored: pytorch_ood(name, train, s, None), seconds,
                    args.repeat)})
            row["pytorch_ood"] = {"class": POOD_SETTINGS[name], **theirs}
        rows.append(row)
        mine, theirs = row["ours"], row.get("pytorch_ood", {})
        print(f"{name:22s} ours fit {fmt(mine['fit_s']):>9s} score {fmt(mine['score_s']):>9s}"
              f" [{mine['status']}]   pytorch-ood fit {fmt(theirs.get('fit_s')):>9s} score "
              f"{fmt(theirs.get('score_s')):>9s} [{theirs.get('status', '-')}]", flush=True)


def print_table(rows: list[dict[str, Any]]) -> None:
    print("\n| detector | rows scored | fit s | score s | pytorch-ood | fit s | score s | note |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        mine, theirs = row["ours"], row.get("pytorch_ood", {})
        notes = [s for s in (mine["status"], theirs.get("status")) if s and s != "ok"]
        if mine.get("nonfinite"):
            notes.append(f"{mine['nonfinite']} non-finite scores")
        print(f"| {row['detector']} | {row.get('rows_scored', '')} | {fmt(mine.get('fit_s'))} | "
              f"{fmt(mine.get('score_s'))} | {theirs.get('class', '')} | "
              f"{fmt(theirs.get('fit_s'))} | {fmt(theirs.get('score_s'))} | {'; '.join(notes)} |")


def write(args: argparse.Namespace, wanted: set[str], sizes: dict[str, int], seconds: float,
          load_before: tuple[float, float, float], neighbours: int,
          rows: list[dict[str, Any]]) -> None:
    mode = "full" if sizes == FULL else "quick" if args.quick else f"rows / {args.divide}"
    if wanted and args.out.exists():  # --only updates those rows of an earlier run of this mode
        earlier = json.loads(args.out.read_text())
        if earlier.get("mode") == mode and earlier.get("sizes") == sizes:
            redone = {row["detector"] for row in rows}
            rows = sorted([r for r in earlier["rows"] if r["detector"] not in redone] + rows,
                          key=lambda r: r["detector"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "mode": mode,
        "sizes": sizes,
        "budget_s": seconds,
        "repeat": args.repeat,
        "clock": args.clock,
        "setting": args.setting,
        "neighbours": neighbours,
        "backend": str(compute.current()),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "blas_threads": args.threads,
                    "load_average_1_5_15min_before": load_before,
                    "load_average_1_5_15min_after": os.getloadavg()},
        "rows": rows,
    }, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
