"""The offline demo: a small CNN on digits, the C-OOD severity benchmark and far-OOD sets.

    oodbench demo [--out oodbench-demo] [--seed 0]

1. Train :class:`~oodbench.models.small_cnn.SmallCNN` on the ID digits 0-5 (the training part
   of :mod:`oodbench.data.demo`), deterministic for the seed.
2. Write ``<out>/experiment.toml``: that model, the C-OOD severity benchmark with the held-out
   digits 6-9 as the OOD class pool, the far-OOD sets (letters, photos, textures, noise) as a
   custom benchmark, and every registered detector that applies (``"all"``).
3. Run it with :func:`oodbench.run_experiment` (so the demo is an ordinary experiment: re-run
   or edit it with ``oodbench run <out>/experiment.toml``) and write the HTML report.
4. The loss comparison (:mod:`oodbench.demo_losses`, in ``<out>/losses/``): the same CNN
   trained with each loss of the HEM paper's table, benchmarked with MSP, max-logit and energy.

C-OOD settings: the pool has only 4 classes, so each severity level is one class
(``window = 1``, against the paper's 1000 of ~10,000) and there are 4 levels (``n_levels = 4``:
every window of one class is a level, easiest to hardest), each class's images split 75/25
into severity-estimation and test images as in the paper.

Torch runs on one thread during the demo: the network is too small for intra-op threads to
help, on a busy machine they only contend (measured 5-10x slower with 2 threads under load),
and a fixed thread count keeps the floating-point results identical from run to run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from oodbench.data.demo import demo_data
from oodbench.demo_benchmarks import (
    COOD_NAME,
    DEMO_LEVELS,
    DEMO_WINDOW,
    FAR_NAME,
    N_ID_CLASSES,
    benchmark_tables,
)
from oodbench.extract.runtime import torch_threads
from oodbench.train.small_cnn import train_small_cnn

__all__ = ["COOD_NAME", "DEMO_K", "DEMO_LEVELS", "DEMO_WINDOW", "FAR_NAME", "N_ID_CLASSES",
           "DemoResult", "benchmark_tables", "experiment_text", "run_demo"]

#: the ID training digits the detectors fit on (60 % of digits 0-5)
N_FIT_BANK = 650
#: KNN's and NNGuide's k on that bank: under 1 % of it (LargeKWarning), as the papers' share
DEMO_K = 5

WEIGHTS = "small_cnn.safetensors"


@dataclass(frozen=True)
class DemoResult:
    """What the demo produced."""

    out: Path
    results: pd.DataFrame
    report_html: Path
    report_markdown: Path
    skipped_detectors: tuple[str, ...]  # registered detectors that do not apply (CLIP, MOS)
    loss_results: pd.DataFrame  # the loss comparison (one model per training loss)
    loss_report_html: Path


def experiment_text(seed: int) -> str:
    """The demo's experiment file (TOML), with comments."""
    return f"""# Written by `oodbench demo --seed {seed}`. Re-run (finished cells are skipped) with:
#   oodbench run {{this file}}        and rebuild the report with   oodbench report {{its folder}}
[experiment]
name = "oodbench demo (seed {seed})"
output = "."          # relative to this file
device = "cpu"        # bit-identical results on every machine
batch_size = 256

[[models]]
name = "small_cnn"
factory = "oodbench.models.small_cnn:SmallCNN"
options = {{ num_classes = {N_ID_CLASSES}, seed = {seed} }}
weights = "{WEIGHTS}"  # trained by the demo on the ID training digits

[id]
test = {{ demo = "id_test", seed = {seed} }}   # digits 0-5, held-out part
fit = {{ demo = "id_fit", seed = {seed} }}     # digits 0-5, the training part
val = {{ demo = "id_val", seed = {seed} }}     # digits 0-5, held out: temperature scaling, KL-matching

{benchmark_tables(seed)}
[[detectors]]
name = "all"          # every registered detector that applies to this model, except those below

# k for the demo's bank of {N_FIT_BANK} training digits: the KNN paper's share of the bank is
# k of about 0.1 % (k=50 of CIFAR-10's 50,000 images); k=50, the class default, would be 8 %
[[detectors]]
name = "knn"
hyperparams = {{ k = {DEMO_K} }}

[[detectors]]
name = "nnguide"
hyperparams = {{ k = {DEMO_K} }}
"""


def run_demo(out: str | Path = "oodbench-demo", *, seed: int = 0, progress: bool = True,
             figures: bool = True) -> DemoResult:
    """Train, benchmark and report (see the module docstring); starts from a clean output.
    ``figures=False`` writes the reports' tables without their figures (the results are the
    same: the figures are drawn from them)."""
    from safetensors.torch import save_file

    from oodbench import detectors
    from oodbench.demo_losses import run_loss_comparison
    from oodbench.results.report import write_report
    from oodbench.run import run_experiment

    folder = Path(out)
    for stale in ("results", "results.parquet", "results.parquet.migrated", "scores",
                  "failures.log", "report.html", "report.md", "losses"):
        path = folder / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    data = demo_data(n_id_classes=N_ID_CLASSES, seed=seed)
    with torch_threads(1):
        model = train_small_cnn(data.train_images, data.train_labels, num_classes=N_ID_CLASSES,
                                seed=seed)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / WEIGHTS))
        experiment = folder / "experiment.toml"
        experiment.write_text(experiment_text(seed), encoding="utf-8")
        results = run_experiment(experiment, progress=progress, extract_progress=False)
        loss_results = run_loss_comparison(folder / "losses", seed=seed, progress=progress)
    report = write_report(folder, figures=figures)
    loss_report = write_report(folder / "losses", figures=figures)
    not_run = tuple(r["name"] for r in detectors.available()
                    if {"text_embeddings", "groups"} & set(r["requires"]))
    return DemoResult(folder, results, report.html, report.markdown, not_run, loss_results,
                      loss_report.html)
