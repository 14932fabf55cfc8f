"""The demo's loss comparison files: valid training configs and experiment, one per loss."""

from __future__ import annotations

from oodbench.demo_losses import DETECTORS, LOSSES, RECIPE, experiment_text, train_config_text
from oodbench.run.experiment import load_experiment
from oodbench.train.config import read_train_config


def test_configs_differ_only_in_the_loss(tmp_path):
    for loss in LOSSES:
        (tmp_path / f"train-{loss}.toml").write_text(train_config_text(loss, seed=3))
    configs = {loss: read_train_config(tmp_path / f"train-{loss}.toml") for loss in LOSSES}
    for loss, config in configs.items():
        assert config.train.loss == loss and config.train.seed == 3
        assert {k: getattr(config.train, k) for k in RECIPE} == RECIPE
        ce = configs["ce"].train.model_dump()
        differ = {k for k, v in config.train.model_dump().items() if ce[k] != v}
        assert differ <= {"loss", "name"}
    (tmp_path / "experiment.toml").write_text(experiment_text(seed=3))
    experiment = load_experiment(tmp_path / "experiment.toml")
    assert [m.name for m in experiment.models] == list(LOSSES)
    assert [d.name for d in experiment.detectors] == list(DETECTORS)
