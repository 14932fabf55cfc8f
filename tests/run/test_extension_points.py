"""A new benchmark kind and a new tuning protocol, each registered from this file alone, run end
to end through an experiment file (``oodbench run``): no other module knows their names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import pytest
from click.testing import CliRunner
from pydantic import StrictInt, StrictStr

from oodbench.benchmarks import KINDS
from oodbench.benchmarks.base import Benchmark
from oodbench.benchmarks.kinds import BenchmarkEntry, BenchmarkKind, KindInputs, register
from oodbench.benchmarks.standard import OodSetsBenchmark
from oodbench.cli.main import main
from oodbench.data.spec import SourceSpec
from oodbench.results import wide
from oodbench.results.table import ResultsTable
from oodbench.schema import Schema
from oodbench.tuning import PROTOCOLS
from oodbench.tuning.protocol import Objective, TuningProtocol
from oodbench.tuning.protocol import register as register_protocol
from tests.run.tiny import write_tiny_experiment


class OneSetEntry(BenchmarkEntry):
    """``type = "one_set"``: the ID test set against one OOD source."""

    type: Literal["one_set"] = "one_set"
    name: StrictStr = "one_set"
    ood: SourceSpec

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        yield f"{where}.ood", self.ood

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "ood": self.ood.describe()}


class OneSet(BenchmarkKind):
    name = "one_set"
    entry = OneSetEntry
    needs = frozenset({"id_test"})

    @classmethod
    def build(cls, entry: OneSetEntry, inputs: KindInputs) -> Benchmark:
        assert inputs.id_test is not None
        return OodSetsBenchmark(inputs.id_test, {"ood": inputs.source(entry.ood)},
                                kinds={"ood": "far"}, name=entry.name)


class TargetSettings(Schema):
    target: StrictInt


class ClosestToTarget(TuningProtocol):
    """Scores a point by how close its ``k`` is to the ``target`` of the tune table."""

    name = "closest_to_target"
    settings = TargetSettings
    needs = frozenset({"fit"})

    @classmethod
    def objective(cls, build, data, criterion, settings) -> Objective:
        def score(point):
            build(point).fit(data.fit, data.model, id_val=data.id_val)  # every point builds
            return {"closeness": -abs(point["k"] - settings.target)}

        return Objective(score, "closeness", True, {"target": settings.target})


@pytest.fixture
def registered() -> Iterator[None]:
    register(OneSet)
    register_protocol(ClosestToTarget)
    yield
    del KINDS["one_set"], PROTOCOLS["closest_to_target"]


EXTRA = """
[[benchmarks]]
type = "one_set"
ood = { folder = "data/noise" }

[[detectors]]
name = "knn"
tune = { protocol = "closest_to_target", target = 2, space = { k = [1, 2, 3] } }
"""


def test_a_new_kind_and_protocol_run_through_an_experiment_file(tmp_path, registered):
    toml = write_tiny_experiment(tmp_path)
    toml.write_text(toml.read_text() + EXTRA)
    result = CliRunner().invoke(main, ["run", str(toml), "--no-progress"])
    assert result.exit_code == 0, result.output
    rows = ResultsTable(tmp_path / "out").read()
    assert set(rows["status"]) == {"ok"}
    table = wide(rows)
    one_set = table[(table["benchmark"] == "one_set") & (table["group"] == "ood")]
    sets = table[(table["benchmark"] == "sets") & (table["group"] == "noise")]
    for detector in ("msp", "energy"):  # the same ID and OOD images: the same numbers
        a = one_set[one_set["detector"] == detector]["auroc"].to_numpy()
        b = sets[sets["detector"] == detector]["auroc"].to_numpy()
        # the same cached activations through the same detector code in this run: the same
        # scores, so the same counts (1e-12 only formats)
        assert a.size == 1 and np.allclose(a, b, rtol=0, atol=1e-12)
    tuned = rows[[t.get("protocol") == "closest_to_target" for t in rows["tuning"]]]
    assert not tuned.empty
    record = tuned["tuning"].iloc[0]  # a typed mapping, no JSON to decode
    assert record["protocol"] == "closest_to_target" and record["best_params"] == {"k": 2}
    assert record["target"] == 2 and record["criterion"] == "closeness"
    assert {h["k"] for h in tuned["hyperparams"]} == {2}


def test_their_schemas_check_the_file(tmp_path, registered):
    from oodbench.errors import ExperimentError
    from oodbench.run.experiment import load_experiment

    toml = write_tiny_experiment(tmp_path)
    toml.write_text(toml.read_text() + EXTRA.replace("target = 2", "targte = 2"))
    with pytest.raises(ExperimentError, match=r"tune: unknown key 'targte'; did you mean 'target'"):
        load_experiment(toml)
    toml.write_text(toml.read_text().replace('ood = { folder = "data/noise" }', "oods = 1"))
    with pytest.raises(ExperimentError, match=r"\[\[benchmarks\]\] #3: unknown key 'oods'"):
        load_experiment(toml)
