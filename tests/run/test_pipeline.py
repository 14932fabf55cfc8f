"""The one-way pipeline's promises: spec -> plan -> resolve -> execute.

* each detector configuration is built once per run (``detectors.create`` and the detector's
  construction counted over a whole run);
* planning reads no file (what keys need from the disk comes from ``run.resolve``);
* importing the experiment schema builds nothing (no module of the construction side of
  ``run``), and, once ``tune`` and ``models`` import lazily, none of ``train``, ``tune``,
  ``extract`` or ``models`` (a strict expected failure until then, see docs/architecture.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oodbench
from oodbench import detectors
from oodbench.detectors import base as detector_base
from oodbench.detectors.base import Detector
from oodbench.run import prepare
from oodbench.run.experiment import parse_experiment
from oodbench.run.plan import make_plan
from oodbench.run.resolve import resolve
from tests.conftest import REPO
from tests.run.test_experiment import minimal
from tests.run.tiny import write_tiny_experiment


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    return write_tiny_experiment(tmp_path)


def test_each_detector_configuration_is_created_once_per_run(tiny, monkeypatch):
    """From reading the file to the last score: one ``detectors.create`` call and one detector
    construction per configuration; every cell of a configuration uses a copy of it."""
    created: list[str] = []
    built: list[str] = []
    create, post_init = detector_base.create, Detector.__post_init__

    def counted_create(name, **kwargs):
        created.append(name)
        return create(name, **kwargs)

    def counted_post_init(self):
        built.append(self.name)
        post_init(self)

    monkeypatch.setattr(detector_base, "create", counted_create)
    monkeypatch.setattr(detectors, "create", counted_create)
    monkeypatch.setattr(Detector, "__post_init__", counted_post_init)
    rows = oodbench.run_experiment(tiny, progress=False)
    in_run = sorted(created), sorted(built)

    plan = prepare(tiny).plan  # planning again, to know the configurations
    configs = {cell.config for cell in plan.cells}
    assert len(plan.cells) == len(configs) * len(plan.experiment.benchmarks)  # one model
    names = sorted(c.name for c in configs)
    assert in_run == (names, names)
    assert set(rows.drop_duplicates("cell")["status"]) <= {"ok", "skipped"}
    assert rows["cell"].nunique() == len(plan.cells)


def test_planning_reads_no_file(tmp_path):
    """The weights' digest enters the keys through ``resolve``: with the resolved identities,
    planning works without the weights file, and gives the keys it gave with it."""
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"not really a checkpoint")
    exp = parse_experiment(minimal(models=[{"spec": "timm:resnet18", "weights": "w.pt"}]),
                           base_dir=tmp_path)
    resolved = resolve(exp)
    keys = [c.key for c in make_plan(exp).cells]
    weights.unlink()
    assert [c.key for c in make_plan(exp, resolved).cells] == keys
    weights.write_bytes(b"retrained")  # and the digest is in the key
    assert [c.key for c in make_plan(exp).cells] != keys


def _modules_loaded_by(module: str) -> list[str]:
    """The ``oodbench`` modules a fresh interpreter has loaded after ``import module``."""
    code = (f"import json, sys, {module}\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'oodbench')))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env, cwd=REPO)
    return json.loads(out.stdout)


#: the schema of the experiment file (``[experiment]``, ``[id]``, the entries' specs)
SCHEMA = "oodbench.run.experiment"


def test_importing_the_schema_builds_nothing():
    """The specs describe; building (``run.build``), planning, resolving and running live in
    modules that the schema does not import."""
    loaded = _modules_loaded_by(SCHEMA)
    run_side = sorted(m for m in loaded if m.startswith("oodbench.run"))
    assert run_side == ["oodbench.run", "oodbench.run.detector_spec", "oodbench.run.experiment"]


#: what the schema may load of the packages that train, tune, extract and load models: their
#: light package ``__init__``s (lazy names only) and the modules of the specs themselves (the
#: names ``[id] fit_transform`` takes: ``models.fit_transforms``, a table without torch)
LIGHT = {"oodbench.tuning", "oodbench.tuning.spec", "oodbench.models", "oodbench.models.spec",
         "oodbench.models.fit_transforms"}


def test_importing_the_schema_loads_no_training_tuning_extraction_or_model_code():
    loaded = _modules_loaded_by(SCHEMA)
    heavy = [m for m in loaded if m.split(".")[1:2] in (["train"], ["tuning"], ["extract"],
                                                        ["models"]) and m not in LIGHT]
    assert heavy == []
    # nor the registered implementations: the benchmark kinds' benchmarks, the detectors
    assert not [m for m in loaded if m.split(".")[1:2] == ["detectors"]
                or m in ("oodbench.benchmarks.base", "oodbench.benchmarks.cood",
                         "oodbench.benchmarks.standard")]


def test_the_entry_point_is_a_function_and_run_is_only_a_package():
    """``oodbench.run_experiment`` and ``oodbench.tune`` are the entry points, ordinary
    functions; no module makes itself callable by swapping its module's class (``oodbench.run``
    and ``oodbench.tuning`` are only packages)."""
    import types

    import oodbench
    import oodbench.run

    assert callable(oodbench.run_experiment) and isinstance(oodbench.run_experiment,
                                                            types.FunctionType)
    assert type(oodbench.run) is types.ModuleType and not callable(oodbench.run)
    import oodbench.tuning.spec  # loading the package does not replace the function

    assert isinstance(oodbench.tune, types.FunctionType)
    assert type(oodbench.tuning) is types.ModuleType and not callable(oodbench.tuning)
    swapped = [p for p in (REPO / "src" / "oodbench").rglob("*.py")
               if "sys.modules[__name__].__class__" in p.read_text(encoding="utf-8")]
    assert [p.relative_to(REPO / "src").as_posix() for p in swapped] == []
