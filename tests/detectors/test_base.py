"""The Detector base: what every detector checks about its hyper-parameters."""

from __future__ import annotations

import numpy as np
import pytest

from oodbench import detectors
from oodbench.detectors.base import integer_fields
from oodbench.errors import InvalidInputError


def test_integer_hyperparameters_refuse_non_integers() -> None:
    """Issue 23 item 8: knn with k = 1.5 ran as k = 1 and recorded k: 1.5."""
    with pytest.raises(InvalidInputError, match=r"detector 'knn': k must be an integer; got 1\.5"):
        detectors.create("knn", k=1.5)
    with pytest.raises(InvalidInputError, match="k must be an integer; got True"):
        detectors.create("knn", k=True)
    with pytest.raises(InvalidInputError, match="dim must be an integer"):
        detectors.create("vim", dim=10.0)
    assert detectors.create("knn", k=np.int64(3)).k == 3
    assert detectors.create("react", percentile=90).percentile == 90  # a float field takes ints


def test_every_integer_field_of_every_detector_is_checked() -> None:
    for row in detectors.available():
        cls = detectors.detector_class(row["name"])
        for name in integer_fields(cls):
            with pytest.raises(InvalidInputError, match=f"{name} must be an integer"):
                detectors.create(row["name"], **{name: 2.5})
    assert "k" in integer_fields(detectors.detector_class("knn"))


def test_an_experiment_with_a_fractional_k_is_refused(tmp_path) -> None:
    """Refused when the experiment is planned (the one ``create`` of each configuration checks
    the values; the spec checks only the names), before anything runs."""
    from oodbench.run.experiment import ExperimentError, parse_experiment
    from oodbench.run.plan import make_plan

    data = {"models": [{"spec": "timm:resnet18"}], "id": {"test": {"digits": [0, 1]},
                                                          "fit": {"digits": [0, 1]}},
            "benchmarks": [{"type": "custom", "groups": {"ood": {"digits": [5]}}}],
            "detectors": [{"name": "knn", "hyperparams": {"k": 1.5}}]}
    with pytest.raises(ExperimentError, match=r"\[\[detectors\]\] #1.*k must be an integer"):
        make_plan(parse_experiment(data, base_dir=tmp_path))


def test_registration_checks_the_name_and_the_declared_inputs() -> None:
    """The detector registry is an ``oodbench.registry.Registry`` declaring ``requires``."""
    from oodbench.detectors.base import _REGISTRY, Detector, register

    class Typo(Detector):
        name = "typo_requires_test"
        requires = frozenset({"logitz"})

    with pytest.raises(TypeError, match=r"Typo.requires: unknown \['logitz'\]"):
        register(Typo)
    assert "typo_requires_test" not in _REGISTRY

    class Taken(Detector):
        name = "msp"
        requires = frozenset({"logits"})

    with pytest.raises(TypeError, match="detector name 'msp' registered twice"):
        register(Taken)
