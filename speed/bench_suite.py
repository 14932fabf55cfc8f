"""The whole detector suite next to one forward pass, on the CPU.

1. ``forward``: a ResNet-50 (timm, random weights: speed does not depend on them) extracts
   logits and features of ``--images`` real JPEGs (the first of ``/work/shared/data``'s
   ``imagenet-val-1300``, or ``--images-dir``) on the CPU, float32, with
   ``oodbench.extract.extract`` into an empty cache: decoding, preprocessing and the forward
   pass, the cost every run of a detector on the cache is compared with.
2. ``suite``: every detector that runs from logits, features and the head (not the
   live-network, CLIP-text, feature-map or group-head ones) fitted on that cache (the bank is
   the same images) and scoring it: seconds of fit + score, and the ratio to the forward pass,
   per detector, for the whole suite, and for the suite without the exact neighbour searches
   (KNN, NNGuide).
3. ``banks``: how the ratio grows with the bank: the same detectors fitted on ``--banks``
   synthetic rows of ResNet-50 shape (2,048 features, 1,000 classes: ``bench_detectors``'
   arrays) and scoring ``--images`` synthetic rows, each ratio to the measured forward pass
   and (``against_own_forward``) to the forward pass that the bank and the scored rows would
   have cost at the measured seconds per image (the bank is the training images' cache).
4. ``approximate``: at the largest bank, what faiss' approximate indexes would save on KNN's
   search (k = 50 on L2-normalised features): exact flat search (what oodbench runs), IVF-Flat
   (``nlist`` = 4 sqrt(bank), ``nprobe`` 8 and 32) and HNSW-Flat (M 32, efSearch 64 and 256),
   each with its build and search seconds and its exactness: the recall of the exact 50
   neighbours, and the relative error of KNN's score (the distance of the k-th neighbour; an
   approximate search can only find it farther).

Times are wall-clock and CPU seconds of this process (``time.process_time``: less sensitive to
other work on a shared machine than wall time, since both the forward pass and the detectors
use every torch thread); the load averages are recorded. Prints tables and writes
``speed/results/bench_suite.json`` after each part (``--parts`` to run some of them).

    python speed/bench_suite.py                       # 1,300 images, banks 1k..50k
    python speed/bench_suite.py --images 256 --banks 1000,5000 --parts forward,suite
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch

from bench_detectors import make_acts, make_head
from oodbench.data.image_list import ImageList
from oodbench.detectors import available, create
from oodbench.detectors._neighbours import normalized_float32
from oodbench.extract import extract
from oodbench.extract.activations import Activations
from oodbench.models import load

RESULTS = Path(__file__).resolve().parent / "results" / "bench_suite.json"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-val-1300"
MODEL = "timm:resnet50"
#: the detectors whose cost is an exact nearest-neighbour search over the bank
NEIGHBOUR_SEARCH = {"knn", "nnguide"}
PARTS = ("forward", "suite", "banks", "approximate")


def clocks(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def array_detectors() -> list[str]:
    skip = {"model", "text_embeddings", "feature_map", "groups"}
    return [d["name"] for d in available() if not skip & set(d["requires"])]


def forward(images: Path, n: int, batch_size: int) -> tuple[Activations, dict[str, Any]]:
    """Extract ``n`` images with a random-weight ResNet-50 on the CPU; the activations and times."""
    model = load(MODEL, pretrained=False)
    with tempfile.TemporaryDirectory(prefix="bench_suite_") as tmp:
        lines = (images / "labels.txt").read_text().splitlines()[:n]
        listing = Path(tmp) / "images.txt"
        listing.write_text("\n".join(lines) + "\n")
        source = ImageList(listing, images / "images", name="imagenet-val-subset")
        os.environ["OODBENCH_CACHE"] = str(Path(tmp) / "cache")
        out: list[Activations] = []
        wall, cpu = clocks(lambda: out.append(extract(
            model, source, batch_size=batch_size, device="cpu", amp="off", progress=False)))
        acts = out[0]
        acts = Activations(logits=np.array(acts.logits), labels=np.array(acts.labels),
                           ids=np.array(acts.ids), features=np.array(acts.features),
                           head_weight=np.array(acts.head_weight),
                           head_bias=np.array(acts.head_bias))
    return acts, {"images": len(acts), "batch_size": batch_size, "wall_s": wall, "cpu_s": cpu,
                  "images_per_s": len(acts) / wall, "load_average_1min": os.getloadavg()[0]}


def fit_and_score(name: str, train: Activations, test: Activations) -> dict[str, Any]:
    det = create(name)
    fit = train if det.fits_on_data else None
    try:
        wall, cpu = clocks(lambda: det.fit(fit, id_val=fit).score(test))
    except Exception as err:  # one failing detector must not end the benchmark
        return {"status": f"error: {type(err).__name__}: {err}"}
    return {"status": "ok", "wall_s": wall, "cpu_s": cpu}


def ratios(times: dict[str, dict[str, Any]], fwd: dict[str, Any]) -> dict[str, Any]:
    """Per-detector ratios to the forward pass and the suite's totals (with and without the
    exact neighbour searches), on both clocks."""
    ok = {n: t for n, t in times.items() if t["status"] == "ok"}
    out: dict[str, Any] = {}
    for clock in ("wall_s", "cpu_s"):
        total = sum(t[clock] for t in ok.values())
        search = sum(t[clock] for n, t in ok.items() if n in NEIGHBOUR_SEARCH)
        out[clock] = {"suite_s": total, "suite_over_forward": total / fwd[clock],
                      "without_neighbour_search_over_forward": (total - search) / fwd[clock],
                      "neighbour_search_over_forward": search / fwd[clock]}
    return out


def suite(train: Activations, test: Activations, fwd: dict[str, Any]) -> dict[str, Any]:
    times = {}
    for name in array_detectors():
        times[name] = fit_and_score(name, train, test)
        t = times[name]
        shown = (f"{t['wall_s']:8.2f} s wall {t['cpu_s']:8.2f} s CPU = "
                 f"{t['cpu_s'] / fwd['cpu_s']:6.1%} of the forward pass (CPU)"
                 if t["status"] == "ok" else t["status"])
        print(f"  {name:22s}{shown}", flush=True)
    return {"detectors": times, "load_average_1min": os.getloadavg()[0], **ratios(times, fwd)}


def banks(sizes: list[int], n: int, fwd: dict[str, Any]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    head = make_head(1000, 2048, rng)
    test = make_acts(n, head, rng)
    out = []
    for size in sizes:
        train = make_acts(size, head, rng)
        times = {name: fit_and_score(name, train, test) for name in array_detectors()}
        # the forward pass that would have produced this bank and the scored rows, at the
        # measured seconds per image
        scale = (size + n) / fwd["images"]
        own = {k: fwd[k] * scale for k in ("wall_s", "cpu_s")}
        step = {"bank": size, "scored": n, "detectors": times,
                "load_average_1min": os.getloadavg()[0], **ratios(times, fwd),
                "against_own_forward": {"forward_images": size + n, **ratios(times, own)}}
        out.append(step)
        r, o = step["cpu_s"], step["against_own_forward"]["cpu_s"]
        print(f"  bank {size:>6,}: suite {r['suite_over_forward']:6.1%} of the {fwd['images']}-image "
              f"forward pass (CPU), without the neighbour searches "
              f"{r['without_neighbour_search_over_forward']:6.1%}, the searches "
              f"{r['neighbour_search_over_forward']:6.1%}; against the forward pass of its own "
              f"{size + n:,} images {o['suite_over_forward']:6.1%} "
              f"({o['without_neighbour_search_over_forward']:6.1%} without the searches)",
              flush=True)
    return out


def approximate(size: int, n: int, k: int = 50) -> dict[str, Any]:
    """Exact and approximate faiss searches of ``n`` queries in a ``size``-row bank."""
    rng = np.random.default_rng(1)
    head = make_head(1000, 2048, rng)
    bank = normalized_float32(make_acts(size, head, rng).features)
    queries = normalized_float32(make_acts(n, head, rng).features)
    exact_s = clocks(lambda: faiss.knn(queries, bank, k))
    dist, ids = faiss.knn(queries, bank, k)
    exact_score = dist[:, -1]
    nlist = int(4 * np.sqrt(size))
    out: dict[str, Any] = {"bank": size, "queries": n, "k": k,
                           "exact": {"search_wall_s": exact_s[0], "search_cpu_s": exact_s[1]}}

    def measure(label: str, index: faiss.Index, build: Callable[[], None],
                knobs: list[tuple[str, Callable[[], None]]]) -> None:
        built = clocks(build)
        for knob, setup in knobs:
            setup()
            found: list[tuple[np.ndarray, np.ndarray]] = []
            searched = clocks(lambda found=found: found.append(index.search(queries, k)))
            d, i = found[0]
            recall = np.mean([len(np.intersect1d(a, b)) / k for a, b in zip(i, ids)])
            err = (d[:, -1] - exact_score) / np.maximum(exact_score, 1e-12)
            out[f"{label} {knob}"] = {
                "build_wall_s": built[0], "build_cpu_s": built[1], "search_wall_s": searched[0],
                "search_cpu_s": searched[1], "recall_at_k": float(recall),
                "score_rel_error_median": float(np.median(err)),
                "score_rel_error_max": float(np.max(err))}
            print(f"  {label} {knob}: build {built[0]:.2f} s, search {searched[0]:.2f} s "
                  f"(exact {exact_s[0]:.2f} s), recall@{k} {recall:.3f}, k-th distance "
                  f"+{np.median(err):.2e} median / +{np.max(err):.2e} max relative", flush=True)

    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(bank.shape[1]), bank.shape[1], nlist)

    def train_ivf() -> None:
        ivf.train(bank)
        ivf.add(bank)

    measure(f"IVF-Flat nlist={nlist}", ivf, train_ivf,
            [(f"nprobe={p}", lambda p=p: setattr(ivf, "nprobe", p)) for p in (8, 32)])
    hnsw = faiss.IndexHNSWFlat(bank.shape[1], 32)
    measure("HNSW-Flat M=32", hnsw, lambda: hnsw.add(bank),
            [(f"efSearch={e}", lambda e=e: setattr(hnsw.hnsw, "efSearch", e)) for e in (64, 256)])
    return out


def save(result: dict[str, Any]) -> None:
    result["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(),
                         "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                         "faiss": faiss.__version__, "load_average_1_5_15min_now": os.getloadavg()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1300)
    parser.add_argument("--images-dir", type=Path, default=SHARED)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--banks", default="1000,5000,20000,50000")
    parser.add_argument("--parts", default=",".join(PARTS))
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    warnings.simplefilter("ignore")  # e.g. LargeKWarning on the 1k bank: the cost is the point
    result: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    result["load_average_1_5_15min_start"] = os.getloadavg()
    if "forward" in parts or "suite" in parts:
        acts, result["forward"] = forward(args.images_dir, args.images, args.batch_size)
        f = result["forward"]
        print(f"{MODEL} forward pass over {f['images']} JPEGs: {f['wall_s']:.1f} s wall, "
              f"{f['cpu_s']:.1f} s CPU ({f['images_per_s']:.1f} images/s)", flush=True)
        save(result)
        if "suite" in parts:
            result["suite"] = suite(acts, acts, result["forward"])
            save(result)
    fwd = result["forward"]
    if "banks" in parts:
        result["banks"] = banks([int(b) for b in args.banks.split(",")], fwd["images"], fwd)
        save(result)
    if "approximate" in parts:
        result["approximate"] = approximate(max(int(b) for b in args.banks.split(",")), fwd["images"])
        save(result)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
