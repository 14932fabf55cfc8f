"""A UMAP or DOE run SIGKILLed after its first checkpoint resumes to bit-identical weights (the
mask scores and DOE's averaged perturbation come back from method.safetensors); both methods
reached through a training config (`oodbench train CONFIG.toml`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from oodbench.cli.main import main
from oodbench.run.build import run_training
from oodbench.train.config import read_train_config
from tests.train._method_run import method_run
from tests.train._subprocess import kill_after_first_checkpoint


@pytest.mark.heavy
@pytest.mark.parametrize("method", ["umap", "doe"])
def test_killed_run_resumes_bit_identical(tmp_path, method):
    epochs, out = 5, tmp_path / "killed"
    done = kill_after_first_checkpoint(
        ["tests.train._method_run", str(out), method, str(epochs)], out, pause=0.3, timeout=300)
    assert 1 <= done < epochs, "the kill came too late to test resuming"
    resumed = method_run(str(out), method, epochs)
    straight = method_run(str(tmp_path / "straight"), method, epochs)
    a, b = resumed.model.state_dict(), straight.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]


def _images(folder, n, seed):
    rng = np.random.default_rng(seed)
    for i in range(n):
        cls = folder / f"c{i % 2}"
        cls.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(cls / f"{i}.png")


@pytest.mark.parametrize(("loss", "options", "outliers"), [
    ("umap", "{ keep = 0.9 }", False), ("doe", "{ warmup = 1 }", True), ("um", "{}", False)])
def test_reached_through_a_training_config(tmp_path, monkeypatch, loss, options, outliers):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    _images(tmp_path / "train", 24, 0)
    _images(tmp_path / "noise", 16, 1)
    config = tmp_path / "train.toml"
    config.write_text(f"""[train]
loss = "{loss}"
loss_options = {options}
epochs = 2
batch_size = 8
lr = 0.01
device = "cpu"

[model]
factory = "oodbench.models.small_cnn:SmallCNN"
options = {{ num_classes = 2, seed = 0 }}

[data]
train = {{ folder = "train" }}
""" + ('outliers = { folder = "noise" }\n' if outliers else ""))
    result = CliRunner().invoke(main, ["train", str(config), "--no-progress"], terminal_width=200)
    assert result.exit_code == 0, result.output
    again = run_training(read_train_config(config), progress=False)  # loads the finished run
    assert again.config["loss"] == loss and len(again.history) == 2


def test_doe_config_without_outliers_is_a_one_line_error(tmp_path):
    config = tmp_path / "train.toml"
    (tmp_path / "train").mkdir()
    config.write_text('[train]\nloss = "doe"\n\n[model]\nfactory = "oodbench.models.small_cnn:SmallCNN"\n'
                      'options = { num_classes = 2 }\n\n[data]\ntrain = { folder = "train" }\n')
    result = CliRunner().invoke(main, ["train", str(config)], terminal_width=200)
    assert result.exit_code == 2 and "[data].outliers: loss 'doe' needs an outlier source" in result.output


def test_oodbench_list_shows_the_methods_with_their_papers():
    # not a terminal: one tab-separated row per entry, its name first (tests/cli/test_tables.py)
    losses = CliRunner().invoke(main, ["list", "losses"]).output
    names = {line.split("\t")[0] for line in losses.splitlines()}
    assert {"um", "umap", "doe"} <= names
    for text in ("Zhu et al., ICML 2023", "Wang et al., ICLR"):
        assert text in losses, text
    dets = CliRunner().invoke(main, ["list", "detectors"]).output
    names = {line.split("\t")[0] for line in dets.splitlines()}
    assert {"rp_gradnorm", "rp_msp", "rw_energy", "rw_odin", "mood"} <= names
    for text in ("Jiang et", "Li et al."):
        assert text in dets, text
