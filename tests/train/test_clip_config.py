"""CMA and NPOS from a training config (`oodbench train`), bad options caught when the config is
read, and `oodbench list losses` showing both with their papers."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from oodbench.cli.main import main
from oodbench.train.config import TrainConfigError, read_train_config
from tests.run.tiny import write_tiny_experiment

CONFIG = """[train]
loss = "{loss}"
loss_options = {options}
epochs = 2
batch_size = 8
lr = 0.01
optimizer = "sgd"
schedule = "cosine"
device = "cpu"
num_workers = 0
output = "run"

[model]
factory = "tests._clip_fixtures:tiny_clip"
options = {{ class_names = ["a", "b", "c"], layers = 2 }}

[data]
train = {{ folder = "data/id_train" }}
"""

NPOS_OPTIONS = ("{ frozen_blocks = 1, queue_size = 3, k = 2, boundary = 2, samples = 8, "
                "start_epoch = 1 }")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=250)


@pytest.fixture
def folder(tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    write_tiny_experiment(tmp_path)
    return tmp_path


@pytest.mark.parametrize("loss, options", [("cma", "{ warmup_steps = 1 }"), ("npos", NPOS_OPTIONS)])
def test_oodbench_train_runs_the_method(folder, loss, options):
    config = folder / "train.toml"
    config.write_text(CONFIG.format(loss=loss, options=options))
    result = invoke("train", str(config), "--no-progress")
    assert result.exit_code == 0, result.output
    record = json.loads((folder / "run" / "train.json").read_text())
    assert record["config"]["loss"] == loss and record["epochs_done"] == 2
    assert record["history"][-1]["images"] == 24


def test_k_larger_than_the_queue_is_caught_reading_the_config(folder):
    config = folder / "train.toml"
    config.write_text(CONFIG.format(loss="npos", options="{ queue_size = 10, k = 11 }"))
    with pytest.raises(TrainConfigError) as err:
        read_train_config(config)
    assert "needs k <= queue_size (the k-th neighbour in a queue of queue_size embeddings per class); got k=11, queue_size=10" in str(err.value)
    assert "\n" not in str(err.value)
    result = invoke("train", str(config))
    assert result.exit_code != 0 and not (folder / "run").exists()


def test_list_losses_shows_cma_and_npos_with_their_papers():
    result = invoke("list", "losses")
    assert result.exit_code == 0
    for text in ("cma", "lam=0.001", "arXiv 2503.18817", "npos", "k=400", "arXiv 2303.02966"):
        assert text in result.output


EXPERIMENT = """[experiment]
name = "clip-finetuned"
output = "out"
device = "cpu"
batch_size = 16

[[models]]
name = "npos_clip"
train = "train.toml"

[id]
test = { folder = "data/id_test" }

[[benchmarks]]
type = "custom"
name = "sets"
groups.noise = { folder = "data/noise", kind = "far" }

[[detectors]]
name = "mcm"
"""


def test_an_experiment_benchmarks_the_fine_tuned_model(folder):
    """`[[models]] train = "train.toml"` with loss npos: trained once, then scored by MCM."""
    from oodbench.run import run_experiment

    (folder / "train.toml").write_text(CONFIG.format(loss="npos", options=NPOS_OPTIONS))
    experiment = folder / "clip.toml"
    experiment.write_text(EXPERIMENT)
    results = run_experiment(experiment, progress=False, extract_progress=False)
    ok = results[results["status"] == "ok"]
    assert set(ok["model"]) == {"npos_clip"} and set(ok["detector"]) == {"mcm"}
    assert (folder / "run" / "train.json").is_file()
