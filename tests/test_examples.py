"""Every file in examples/ is valid as the format it is (an experiment or a training config),
read by the readers ``oodbench run`` and ``oodbench train`` use. Running them: the tiny
experiment and the training config in tests/test_readme.py and tests/run, the tuning-paper
example in tests/run/test_tuned_detectors.py."""

from __future__ import annotations

import sys
import warnings

import pytest

from oodbench.run.experiment import load_experiment
from oodbench.train.config import read_train_config
from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def test_the_examples_are_found():
    assert {p.name for p in EXAMPLES} >= {"experiment.toml", "tiny_experiment.toml",
                                          "train_tiny.toml", "tune_paper.toml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid(path):
    tables = tomllib.loads(path.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated key in an example
        if "experiment" not in tables:  # a training config: [train], [model], [data]
            assert read_train_config(path).train.optim().epochs >= 1
        else:
            assert load_experiment(path, check_paths=False).detectors
