"""PLF and VRA+ declare that their defaults need tuning (``Detector.untuned_defaults``): run
untuned they warn (once per run through the run's warning aggregation), tuned or given values
they do not, and ``oodbench list detectors`` marks them from the declaration."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tomllib
from click.testing import CliRunner

import oodbench
from oodbench.cli.main import main
from oodbench.detectors import available, create, detector_class
from oodbench.detectors.base import UntunedDefaultsWarning
from oodbench.extract.activations import Activations
from oodbench.run.experiment import parse_experiment
from tests.run.tiny import write_tiny_experiment

MARKED = {"plf", "vra_plus"}


def _acts(n: int = 40, seed: int = 0) -> Activations:
    rng = np.random.default_rng(seed)
    return Activations(logits=rng.normal(size=(n, 3)), labels=np.arange(n) % 3,
                       ids=np.arange(n).astype(str), features=np.abs(rng.normal(size=(n, 6))),
                       head_weight=rng.normal(size=(3, 6)), head_bias=np.zeros(3))


def _fit_warnings(det) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det.fit(_acts())
    return [w for w in caught if issubclass(w.category, UntunedDefaultsWarning)]


def test_only_plf_and_vra_plus_declare_untuned_defaults():
    declared = {row["name"] for row in available() if row["untuned_defaults"]}
    assert declared == MARKED
    for name in MARKED:  # every declared name is a hyper-parameter of the class
        cls = detector_class(name)
        assert set(cls.untuned_defaults) <= set(cls().hyperparams), name


@pytest.mark.parametrize("name", sorted(MARKED))
def test_untuned_run_warns_naming_the_detector_and_the_fix(name):
    caught = _fit_warnings(create(name))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"detector {name!r} runs with its untuned defaults" in message
    assert f"oodbench.tune({name!r}, 'paper'" in message


@pytest.mark.parametrize(("name", "change"), [("plf", {"u": 0.3}), ("vra_plus", {"gamma": 1.0})])
def test_given_or_tuned_values_do_not_warn(name, change):
    assert not _fit_warnings(create(name, **change))
    tuned = create(name)
    tuned.tuning = "ood_val grid (auroc)"
    assert not _fit_warnings(tuned)
    assert not _fit_warnings(create("msp"))  # a detector without the declaration never warns


def test_tuning_does_not_warn_for_its_candidates():
    """The grid holds the defaults' point (u = 0.5): the candidates a search fits are not an
    untuned run."""
    acts = _acts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        oodbench.tune("vra_plus", {"u": [0.2, 0.5, 0.8]}, acts, _acts(seed=1), fit=acts)
    assert not [w for w in caught if issubclass(w.category, UntunedDefaultsWarning)]


def test_list_detectors_marks_the_declared_detectors():
    result = CliRunner().invoke(main, ["list", "detectors", "--format", "tsv"])
    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in result.output.splitlines() if "\t" in line]
    header = lines[0]
    column = header.index("presets")
    marked = {row[0] for row in lines[1:] if "defaults need tuning" in row[column]}
    assert marked == MARKED


def test_a_run_shows_the_warning_once_with_its_cell_count(tmp_path, monkeypatch):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    tiny = write_tiny_experiment(tmp_path)
    data = tomllib.loads(tiny.read_text())
    data["detectors"] = ["plf"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        oodbench.run_experiment(parse_experiment(data, base_dir=tiny.parent), progress=False)
    shown = [str(w.message) for w in caught if issubclass(w.category, UntunedDefaultsWarning)]
    assert len(shown) == 1  # plf in two benchmarks: one line for the run
    assert "detector 'plf' runs with its untuned defaults" in shown[0]
    # the two cells share one fitted detector; both score with the untuned defaults
    assert shown[0].endswith("(in 2 of 2 cells)"), shown[0]
