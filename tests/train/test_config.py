"""Training configs: `oodbench train`, the content-keyed training cache, `[[models]] train =`."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from oodbench.cli.main import main
from oodbench.run import run_experiment
from oodbench.run.build import training_key
from oodbench.train.config import TrainConfigError, read_train_config
from tests.conftest import REPO
from tests.run.tiny import write_tiny_experiment


@pytest.fixture
def tiny(tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    experiment = write_tiny_experiment(tmp_path)
    shutil.copy(REPO / "examples" / "train_tiny.toml", tmp_path / "train.toml")
    return experiment


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


def test_train_command_trains_once_then_reuses_the_cache(tiny):
    config = tiny.parent / "train.toml"
    first = invoke("train", str(config), "--no-progress")
    assert first.exit_code == 0, first.output
    runs = list((tiny.parent / "cache" / "train").iterdir())
    assert len(runs) == 1 and runs[0].name == training_key(read_train_config(config))
    record = runs[0] / "train.json"
    assert json.loads(record.read_text())["config"]["loss"] == "hem"
    stamp = record.stat().st_mtime_ns
    second = invoke("train", str(config), "--no-progress")
    assert second.exit_code == 0 and record.stat().st_mtime_ns == stamp  # nothing retrained
    assert "weights:" in second.output and "model.safetensors" in second.output
    # issue 23 item 9: the command says whether it trained, resumed or found the run finished
    assert f"a new run in {runs[0]}" in " ".join(first.output.split())
    assert f"already finished (3 of 3 epochs) in {runs[0]}" in " ".join(second.output.split())
    config.write_text(config.read_text().replace("seed = 0\ndevice", "seed = 1\ndevice"))
    assert training_key(read_train_config(config)) != runs[0].name  # another seed, another run


def test_experiment_model_points_at_a_training_config(tiny):
    text = tiny.read_text().replace(
        '[[models]]\nname = "small_cnn"',
        '[[models]]\nname = "hem_cnn"\ntrain = "train.toml"\n\n[[models]]\nname = "small_cnn"')
    text = text.split("[[detectors]]\nname = \"knn\"")[0]  # msp and energy are enough here
    tiny.write_text(text)
    results = run_experiment(tiny, progress=False, extract_progress=False)
    ok = results[results["status"] == "ok"]
    assert {"hem_cnn", "small_cnn"} <= set(ok["model"])
    assert len(list((tiny.parent / "cache" / "train").iterdir())) == 1


@pytest.mark.parametrize(("edit", "expected"), [
    (('loss = "hem"', 'loss = "logit_norm"'), "[train].loss: unknown loss 'logit_norm'. Did you mean 'logitnorm'"),
    (('loss = "hem"', 'loss = "oe"'), "[train]: loss 'oe' has no option margin"),
    (('loss_options = { margin = 1.0 }', 'loss_options = {}'), None),
    ((('loss = "hem"', 'loss = "oe"'), ("{ margin = 1.0 }", "{}")), "[data].outliers: loss 'oe' needs an outlier source"),
    (("epochs = 3", "epochs = 3\nwarmup_epochs = 3"), "needs warmup_epochs < epochs; got warmup_epochs=3, epochs=3"),
    (("trainable = \"all\"", "trainable = \"body\""), "[train].trainable: expected one of"),
    (("loss_options = { margin = 1.0 }", "loss_options = { tau = 1.0 }"), "loss 'hem' has no option tau"),
])
def test_bad_configs_are_one_line_errors(tiny, edit, expected):
    config = tiny.parent / "train.toml"
    text = config.read_text()
    for old, new in edit if isinstance(edit[0], tuple) else (edit,):
        assert old in text
        text = text.replace(old, new)
    config.write_text(text)
    if expected is None:  # the edit is fine: it parses
        assert read_train_config(config).train.loss_options == {}
        return
    with pytest.raises(TrainConfigError) as err:
        read_train_config(config)
    assert expected in str(err.value) and "\n" not in str(err.value)
    result = invoke("train", str(config))
    assert result.exit_code == 2 and expected in result.output


def test_list_losses():
    result = invoke("list", "losses")
    assert result.exit_code == 0
    for text in ("logitnorm", "tau=0.04", "hem", "margin=1.0", "oe", "arXiv 2501.12191"):
        assert text in result.output
