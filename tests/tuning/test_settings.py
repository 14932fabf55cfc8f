"""Protocol settings declared as data, and the one search driver.

Every built-in protocol's settings are a :class:`~oodbench.tuning.settings.ProtocolSettings`
dataclass whose fields declare their valid values; the messages, the experiment table's keys
and the search-space checks are derived from those declarations, and validating a tune table
loads no training code. Every protocol goes through ``dispatch.trials``, the only loop over a
search space in ``oodbench.tuning``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oodbench
from oodbench.constraints import Declared, Flag, Interval, ListOf, Options, undeclared
from oodbench.errors import ConfigError, InvalidInputError
from oodbench.schema import parse
from oodbench.tuning import PROTOCOLS, Range, dispatch
from oodbench.tuning.settings import ProtocolSettings, declared_settings
from oodbench.tuning.space import DetectorBuilder, check_bounds, detector_builder
from oodbench.tuning.spec import TuneSpec
from tests.tuning.test_tune import data  # noqa: F401 - the shared fixture

REPO = Path(__file__).resolve().parents[2]
TUNING = REPO / "src" / "oodbench" / "tuning"

#: one table per built-in protocol, each giving some of its own keys (no trainer options)
TABLES = {
    "ood_val": {"protocol": "ood_val", "space": {"percentile": [90.0]},
                "ood": {"folder": "data/noise"}},
    "held_out_classes": {"protocol": "held_out_classes", "space": {"percentile": [90.0]},
                         "n_variants": 2, "held_out_fraction": 0.3, "retrain": "head"},
    "held_out_paper": {"protocol": "held_out_paper", "space": "paper", "m_grid": [1, 2],
                       "n_tuning_sets": 3, "disjoint_draws": True},
    "noise": {"protocol": "noise", "space": "paper", "sigmas": [32, 64], "n_sets": 2},
    "fgsm": {"protocol": "fgsm", "space": "paper", "eps": [0.01], "std": [0.2, 0.2, 0.2]},
}


def test_the_tables_cover_every_built_in_protocol():
    assert set(TABLES) == set(PROTOCOLS)


#: tables whose ``train = {...}`` gives trainer options: optimiser fields on every trainer's
#: preset, and a recipe name with a changed field (the scratch variants' small-image recipe)
TRAIN_TABLES = [
    {"protocol": "held_out_classes", "space": {"percentile": [90.0]}, "retrain": "head",
     "train": {"epochs": 2, "lr": 0.01, "loss": "ce"}},
    {"protocol": "held_out_classes", "space": {"percentile": [90.0]}, "retrain": "full",
     "train": {"epochs": 2, "trainable": "all"}},
    {"protocol": "held_out_paper", "space": "paper", "retrain": "last_block",
     "train": {"batch_size": 32}},
    {"protocol": "held_out_paper", "space": "paper", "retrain": "scratch",
     "train": {"epochs": 2, "optimizer": "adamw"}},
    {"protocol": "held_out_paper", "space": "paper", "retrain": "scratch",
     "train": {"recipe": "cpu-small", "epochs": 2}},
]


def _run_python(code: str) -> list[str]:
    """The JSON list a fresh interpreter prints after running ``code`` (this checkout's src)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env, cwd=REPO)
    return json.loads(out.stdout)


def _loaded_after_validating(tables: list[dict]) -> list[str]:
    """The ``oodbench`` modules a fresh interpreter has loaded after validating ``tables``."""
    return _run_python(
        "import json, sys\n"
        "from oodbench.schema import parse\n"
        "from oodbench.tuning.spec import TuneSpec\n"
        f"for table in json.loads({json.dumps(json.dumps(tables))}):\n"
        "    parse(TuneSpec, table, file='experiment.toml')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'oodbench')))")


def _training_modules(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m.split(".")[1:2] == ["train"]]


def test_validating_tune_tables_loads_no_training_code():
    """A fresh interpreter validates one table of every protocol: no module of
    ``oodbench.train`` is loaded (the protocols' files import training code only on use).
    Tables with ``train = {...}`` (checked against the optimiser's declarations and the
    recipe presets) load only modules of ``oodbench.train`` that import no torch."""
    without = _loaded_after_validating(list(TABLES.values()))
    assert _training_modules(without) == []
    assert "oodbench.tuning.protocols.held_out" in without  # the protocols were validated

    with_train = _loaded_after_validating(TRAIN_TABLES)
    training = _training_modules(with_train)
    # the options were checked against the declarations (a name or value error would have
    # failed the subprocess): the optimiser settings and the recipe presets were read
    assert {"oodbench.train.optim", "oodbench.train.recipe_config"} <= set(training)
    # ... and every training module loaded imports without torch
    torch_loaded = _run_python(
        "import importlib, json, sys\n"
        f"for name in {training!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))")
    assert torch_loaded == []


def test_the_train_tables_are_checked():
    """The tables above are valid only as given: a misspelt option, a bad optimiser value on
    the recipe or an unknown recipe name fails, so the test above validated something."""
    bad = [{**TRAIN_TABLES[0], "train": {"epochs": 2, "lrate": 0.01}},
           {**TRAIN_TABLES[-1], "train": {"recipe": "cpu-small", "epochs": 0}},
           {**TRAIN_TABLES[-1], "train": {"recipe": "cpu-smal"}}]
    for table in bad:
        with pytest.raises(ConfigError):
            parse(TuneSpec, table, file="experiment.toml")
    for table in TRAIN_TABLES:
        assert dict(parse(TuneSpec, table, file="experiment.toml").given_settings["train"]) == (
            table["train"])


@pytest.mark.parametrize("table", TRAIN_TABLES[:4], ids=lambda t: t["retrain"])
@pytest.mark.parametrize(("values", "message"), [
    ({"epochs": 0}, "epochs must be an integer >= 1"),
    ({"lr": -0.1}, "lr must be > 0"),
    ({"optimizer": "adamw", "nesterov": True}, "nesterov"),
])
def test_bad_optimiser_values_of_every_trainer_stop_the_run_at_validation(table, values, message):
    """Every retrain's train = {...} is validated over its trainer's preset (HEAD, FINETUNE,
    LAST_BLOCK, RECIPE) when the experiment is read, not when the first variant trains."""
    bad = {**table, "train": {**table["train"], **values}}
    with pytest.raises(ConfigError, match=f"retrain={table['retrain']!r}.*{message}"):
        parse(TuneSpec, bad, file="experiment.toml")


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_setting_is_declared_and_is_the_tables_keys(name):
    entry = PROTOCOLS[name]
    assert issubclass(entry.settings, ProtocolSettings)
    assert undeclared(entry.settings) == ()
    keys = entry.table_keys()
    assert keys == [k for k in entry.settings.keys() if k not in ("seed", "cache")]
    table = TABLES[name]
    spec = parse(TuneSpec, table, file="experiment.toml")
    assert set(spec.given_settings) == set(table) & set(keys)  # exactly the protocol's keys


def _bad_value(declared: Declared) -> object:
    """A value the declaration refuses, read from the declaration itself."""
    constraint = declared.constraint
    if isinstance(constraint, ListOf):
        return []
    if isinstance(constraint, Options):
        return "no-such-value"
    if isinstance(constraint, Flag):
        return "yes"
    if isinstance(constraint, Interval) and constraint.low is not None:
        return int(constraint.low) - 1 if constraint.integer else float(constraint.low) - 1.0
    return {"not": "valid"}  # a table where a number or a name belongs


def _declared_fields():
    for name in sorted(TABLES):
        settings = PROTOCOLS[name].settings
        for field, declared in declared_settings(settings).items():
            if field != "train":  # a table: its keys are the trainer's (tested below)
                yield name, field, declared


@pytest.mark.parametrize(("name", "field", "declared"), list(_declared_fields()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_setting_fails_in_the_uniform_format(name, field, declared):
    """Through ``oodbench.tune``'s ``settings=`` and through an experiment's tune table: one
    line, ``<protocol>: <field> must be <the declaration's description>``."""
    settings = PROTOCOLS[name].settings
    bad = _bad_value(declared)
    expected = f"{settings.protocol}: {field} must be {declared.constraint.describe()}"
    with pytest.raises(InvalidInputError) as err:
        settings.from_mapping({field: bad})
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)
    if field in PROTOCOLS[name].table_keys():
        with pytest.raises(ConfigError) as err:
            parse(TuneSpec, {**TABLES[name], field: bad}, file="experiment.toml")
        assert expected in str(err.value)


def test_a_misspelt_option_gets_the_closest_one():
    with pytest.raises(InvalidInputError, match=r"retrain must be one of .*; got 'heads'; did "
                                                r"you mean 'head'\?"):
        PROTOCOLS["held_out_classes"].parse_settings({"retrain": "heads"})
    with pytest.raises(InvalidInputError, match=r"unknown setting\(s\) \['n_variant'\] \(did you "
                                                r"mean 'n_variants'\?\)"):
        PROTOCOLS["held_out_paper"].parse_settings({"n_variant": 2})


def test_trainer_options_are_checked_against_the_trainer():
    with pytest.raises(InvalidInputError, match="unknown train option 'epoch'"):
        PROTOCOLS["held_out_classes"].parse_settings({"train": {"epoch": 3}})
    settings = PROTOCOLS["held_out_classes"].parse_settings({"train": {"epochs": 3}})
    assert settings.train == {"epochs": 3}


def test_check_bounds_reads_the_declarations_without_building_a_detector(monkeypatch):
    monkeypatch.setattr(DetectorBuilder, "__call__",
                        lambda *a, **k: pytest.fail("built a detector to check the bounds"))
    build = detector_builder("vra", ["lower_percentile", "upper_percentile"])
    # the lower percentile may reach up to where only a higher upper one admits it
    check_bounds(build, {"lower_percentile": Range(0.0, 90.0),
                         "upper_percentile": Range(80.0, 99.9)})
    with pytest.raises(InvalidInputError, match=r"space\['lower_percentile'\] bound 99.95 is "
                                                r"outside.*lower_percentile <= upper_percentile"):
        check_bounds(build, {"lower_percentile": Range(0.0, 99.95),
                             "upper_percentile": Range(80.0, 99.9)})
    with pytest.raises(InvalidInputError, match=r"bound 1.5 is outside the valid range: "
                                                r"held_out_classes: held_out_fraction must be"):
        check_bounds(detector_builder("react", ["held_out_fraction"], "held_out_classes"),
                     {"held_out_fraction": Range(0.1, 1.5)})


def test_grid_points_are_enumerated_only_by_the_driver():
    """No second loop over a space in ``oodbench.tuning``: ``grid_points`` (the grid's points)
    and ``bayes_search`` (Optuna's) are called by ``dispatch`` alone."""
    callers: dict[str, set[str]] = {"grid_points": set(), "bayes_search": set()}
    for path in TUNING.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in callers:
                callers[node.func.id].add(path.name)
    assert callers == {"grid_points": {"dispatch.py"}, "bayes_search": {"dispatch.py"}}


def test_every_protocol_searches_through_the_one_driver(data, fit_val, monkeypatch):  # noqa: F811
    """ood_val (grid and TPE), held_out_classes and held_out_paper (one search per M): each
    search is one call of ``dispatch.trials``."""
    train, id_val, ood_val = data
    fit, val = fit_val
    calls: list[str] = []
    original = dispatch.trials
    monkeypatch.setattr(dispatch, "trials",
                        lambda *a, **k: (calls.append(a[3]), original(*a, **k))[1])
    grid = {"percentile": [80.0, 90.0]}
    oodbench.tune("react", grid, id_val, ood_val, fit=train)
    oodbench.tune("react", {"percentile": Range(80.0, 95.0)}, id_val, ood_val, fit=train,
                  search="tpe", n_trials=2)
    held_out = {"n_variants": 1, "retrain": "head", "train": {"epochs": 1}, "cache": False}
    oodbench.tune("react", grid, val, None, fit=fit, protocol="held_out_classes",
                  held_out=held_out)
    paper = oodbench.tune("react", grid, val, None, fit=fit, protocol="held_out_paper",
                          held_out={**held_out, "m_grid": [2, 3], "n_tuning_sets": 2})
    assert calls == ["grid", "tpe", "grid", "grid", "grid"]  # paper: one search per M
    assert [m["M"] for m in paper.provenance["per_m"]] == [2, 3]


@pytest.fixture(scope="module")
def fit_val():
    from tests.detectors.conftest import make_activations

    return make_activations(600, 10, 32, seed=0), make_activations(300, 10, 32, seed=1)
