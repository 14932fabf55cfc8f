"""A new benchmark kind and a new tuning protocol, each registered from this file alone, run end
to end through an experiment file (``oodbench run``): no other module knows their names; so does
a new training method with the loss that names it, through ``oodbench.train.train``. And a toy
of every kind of registry entry (every word of ``oodbench list``), each one entry added from
this file, found by name and shown by ``oodbench list``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pytest
from click.testing import CliRunner
from pydantic import StrictInt, StrictStr

from oodbench.benchmarks import KINDS
from oodbench.benchmarks.base import Benchmark
from oodbench.benchmarks.kinds import BenchmarkEntry, BenchmarkKind, KindInputs, register
from oodbench.benchmarks.standard import OodSetsBenchmark
from oodbench.cli import listing
from oodbench.cli.main import main
from oodbench.data import catalog
from oodbench.data.arrays import ArraySource
from oodbench.data.catalog import LAYOUTS, DatasetInfo
from oodbench.data.spec import SourceSpec
from oodbench.detectors.base import DETECTORS, Detector
from oodbench.extract.activations import Activations
from oodbench.losses.base import LOSSES, Loss
from oodbench.models.registry import FAMILIES, ModelFamily
from oodbench.models.small_cnn import SmallCNN
from oodbench.published.catalogue import LOADERS, TableLoader
from oodbench.registry import Registry
from oodbench.results import wide
from oodbench.results.table import ResultsTable
from oodbench.schema import Schema
from oodbench.train import OptimSettings, train
from oodbench.train.hooks import Batch, LoopHooks, Run
from oodbench.train.method_registry import METHODS, TrainingMethod
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


# -- a toy of every kind, each registered from this file, shown by ``oodbench list`` ----------
@dataclass
class ToyDetector(Detector):
    """A toy: the top logit."""

    name = "toy_detector"
    requires = frozenset({"logits"})

    def _score(self, acts: Activations) -> np.ndarray:
        return np.asarray(acts.logits).max(axis=1)


class ToyLoss(Loss):
    """A toy: the mean logit."""

    name = "toy_loss"

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        return logits.mean()


class ToyHooks(LoopHooks):
    """A toy training method: hooks into the classifier loop that record the run's batch size
    in its config and count the optimisation steps (each left to the loop: ``step`` -> None)."""

    def prepare(self, run: Run) -> dict[str, Any]:
        self.steps = 0
        return {"toy_method": f"batches of {run.batch_size}"}

    def step(self, batch: Batch) -> None:
        self.steps += 1
        return None

    def finish(self, model: Any) -> None:
        model.toy_steps = self.steps


class ToyMethodLoss(ToyLoss):
    """A toy loss that trains with the toy method."""

    name = "toy_method_loss"
    method = "toy_method"


TOY_METHOD = TrainingMethod("toy_method", "a toy: counts the steps", ToyHooks)


def toy_loader(name: str, *, pretrained: bool = True, weights: Any = None) -> Any:
    raise AssertionError("listing a family loads nothing")


TOY_DATASET = DatasetInfo(name="toy_dataset", title="A toy: nothing to download",
                          layout=LAYOUTS[0])

class ToyBenchmarks(OneSet):
    """A toy kind that names a benchmark of its own (``oodbench.benchmarks.get``)."""

    name = "toy_kind"

    @classmethod
    def named(cls) -> dict[str, str]:
        return {"toy_benchmark": "a toy"}


#: ``oodbench list`` word -> (the registry, a toy entry, what the listing shows of it); every
#: word has one
TOYS: dict[str, tuple[Registry[Any] | None, Any, str]] = {
    "detectors": (DETECTORS, ToyDetector, "toy_detector"),
    "losses": (LOSSES, ToyLoss, "toy_loss"),
    "models": (FAMILIES, ModelFamily(f"{__name__}:toy_loader", "toy_family:<name>", "a toy"),
               "toy_family:<name>"),
    "benchmarks": (KINDS, ToyBenchmarks, "toy_benchmark"),
    "benchmark-types": (KINDS, OneSet, "one_set"),
    "protocols": (PROTOCOLS, ClosestToTarget, "closest_to_target"),
    "methods": (METHODS, TOY_METHOD, "toy_method"),
    "datasets": (None, TOY_DATASET, "toy_dataset"),  # data: an entry of the catalogue file
    "table-loaders": (LOADERS, TableLoader("toy_table_loader", "a toy", lambda info: None),
                      "toy_table_loader"),
}


def test_every_word_of_oodbench_list_has_a_toy_here():
    assert set(TOYS) == set(listing.KINDS)


@pytest.mark.parametrize("what", list(TOYS))
def test_a_toy_of_every_kind_is_one_entry_and_oodbench_list_shows_it(what, monkeypatch):
    found, toy, shown = TOYS[what]
    if found is None:  # the dataset catalogue is data: the toy is one more entry of its file
        before = len(catalog.datasets())
        entries = {**catalog._builtin(), toy.name: toy}
        monkeypatch.setattr(catalog, "_builtin", lambda: entries)
        found = catalog.datasets()
    else:
        before = len(found)  # (reading it loads the built-in entries)
        found.add(toy)  # the registry's own checks: name, declared needs
    try:
        assert found.lookup(toy.name) is toy and len(found) == before + 1
        result = CliRunner().invoke(main, ["list", what], terminal_width=200)
        assert result.exit_code == 0, result.output
        assert shown in result.output.split()
    finally:
        del found[toy.name]


@pytest.fixture
def toy_method() -> Iterator[None]:
    METHODS.add(TOY_METHOD)
    LOSSES.add(ToyMethodLoss)
    yield
    del METHODS["toy_method"], LOSSES["toy_method_loss"]


def test_a_new_training_method_trains_through_oodbench_train(tmp_path, toy_method):
    """The toy method and its loss, registered from this file alone, train a model: the loop
    ran the method's hooks (its config entry, one counted step per batch)."""
    rng = np.random.default_rng(0)
    source = ArraySource(rng.integers(0, 256, size=(12, 8, 8), dtype=np.uint8),
                         np.arange(12) % 2, name="twelve")
    model = SmallCNN(2, seed=0)
    result = train(model, source, out=tmp_path / "run", loss="toy_method_loss",
                   optim=OptimSettings(epochs=2, batch_size=4), device="cpu", num_workers=0,
                   progress=False)
    assert result.config["loss"] == "toy_method_loss"
    assert result.config["toy_method"] == "batches of 4"
    assert [h["epoch"] for h in result.history] == [1, 2]
    assert model.toy_steps == 2 * (12 // 4)  # two epochs of three batches
