"""The demo's loss comparison: the same small CNN trained with each loss of the HEM paper's
table, benchmarked with the same detectors (``<demo out>/losses/``).

For each loss in ``LOSSES`` the demo writes a training config ``train-<loss>.toml``
(:mod:`oodbench.train.config`): :class:`~oodbench.models.small_cnn.SmallCNN` from the same
seed, trained from scratch on the ID training digits by :func:`oodbench.train.train` with the
same recipe (``RECIPE``) and only the loss changed. One experiment then lists the five models as
``[[models]] train = "train-<loss>.toml"`` (each trains once into the content-keyed training
cache; a second demo run reuses them) and runs ``DETECTORS`` on the demo's two benchmarks, so the
leaderboards and the report have one row per (loss, detector).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from oodbench.demo_benchmarks import N_ID_CLASSES, benchmark_tables

#: the losses of Spratling & Schütt's table (arXiv 2501.12191), with their default options
LOSSES = ("ce", "logitnorm", "hem", "mm", "dice")
DETECTORS = ("msp", "maxlogit", "energy")
#: one recipe for every loss (the paper also trained every loss with CE's settings)
RECIPE = {"epochs": 15, "batch_size": 32, "lr": 3e-3, "optimizer": "adamw",
          "weight_decay": 1e-4, "schedule": "cosine"}


def train_config_text(loss: str, seed: int) -> str:
    """``train-<loss>.toml``: SmallCNN on the ID training digits with ``loss``."""
    recipe = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in RECIPE.items())
    return f"""# Written by `oodbench demo --seed {seed}`: train with `oodbench train {{this file}}`
[train]
name = "small_cnn-{loss}"
loss = "{loss}"
{recipe}
seed = {seed}
device = "cpu"

[model]
factory = "oodbench.models.small_cnn:SmallCNN"
options = {{ num_classes = {N_ID_CLASSES}, seed = {seed} }}

[data]
train = {{ demo = "id_fit", seed = {seed} }}
"""


def experiment_text(seed: int) -> str:
    """The loss comparison's experiment file: one model per loss, the same detectors."""
    models = "\n".join(f'[[models]]\nname = "{loss}"\ntrain = "train-{loss}.toml"\n'
                       for loss in LOSSES)
    dets = "\n".join(f'[[detectors]]\nname = "{d}"\n' for d in DETECTORS)
    return f"""# Written by `oodbench demo --seed {seed}`: the same SmallCNN trained with each loss
[experiment]
name = "oodbench demo: training losses (seed {seed})"
output = "."
device = "cpu"
batch_size = 256

{models}
[id]
test = {{ demo = "id_test", seed = {seed} }}

{benchmark_tables(seed)}
{dets}"""


def run_loss_comparison(folder: Path, *, seed: int, progress: bool) -> pd.DataFrame:
    """Write the training configs and the experiment under ``folder``, run it, return its rows."""
    from oodbench.run import run_experiment

    folder.mkdir(parents=True, exist_ok=True)
    for loss in LOSSES:
        (folder / f"train-{loss}.toml").write_text(train_config_text(loss, seed), encoding="utf-8")
    experiment = folder / "experiment.toml"
    experiment.write_text(experiment_text(seed), encoding="utf-8")
    return run_experiment(experiment, progress=progress, extract_progress=False)
