"""The loss-table study's bookkeeping (benchmarks/loss_table.py) on synthetic logits."""

import importlib.util
import json

import numpy as np
import pytest

from oodbench.config import cache_dir
from oodbench.metrics.delong import auroc_ci
from tests.conftest import REPO


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("loss_table", REPO / "benchmarks" / "loss_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _logits(rng, separation: float) -> dict[str, np.ndarray]:
    """Six-class logits whose max rises by ``separation`` on ID rows over near-OOD rows."""
    def rows(n, shift):
        z = rng.normal(size=(n, 6))
        z[:, 0] += 2.0 + shift
        return z
    return {"id": rows(400, separation), "near": rows(300, 0.0), "far": rows(200, -0.5)}


def _store(table, loss, seed, logits):
    key = f"test-{loss}-{seed}"
    folder = cache_dir() / "loss_table" / key
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "logits.npz", **logits)
    record = {"loss": loss, "seed": seed, "key": key,
              **table.evaluate(logits, np.zeros(len(logits["id"]), dtype=int))}
    (folder / "record.json").write_text(json.dumps(record))
    return record


def test_evaluate_gives_delong_intervals_per_detector(table):
    logits = _logits(np.random.default_rng(0), 0.5)
    record = table.evaluate(logits, np.zeros(400, dtype=int))
    assert record["id_accuracy"] == pytest.approx((logits["id"].argmax(1) == 0).mean())
    msp = table.scores(logits["id"], "msp"), table.scores(logits["near"], "msp")
    ci = auroc_ci(*msp)
    assert record["msp"]["near"] == ci.estimate and record["msp"]["near_ci"] == [ci.low, ci.high]
    assert set(record) >= {"msp", "maxlogit", "energy"}
    assert record["maxlogit"]["near_ci"][0] > 0.5  # a real separation is seen


def test_verdicts_follow_the_paired_tests_on_every_seed(table):
    rng = np.random.default_rng(1)
    runs = []
    for seed in range(3):
        ce = _logits(rng, 0.3)
        runs.append(_store(table, "ce", seed, ce))
        runs.append(_store(table, "hem", seed, _logits(rng, 1.5)))      # much better: holds
        runs.append(_store(table, "mm", seed, _logits(rng, 1.5)))       # better, published worse
        runs.append(_store(table, "dice", seed, ce))                    # identical: no evidence
    runs.append(_store(table, "logitnorm", 0, _logits(rng, 1.5)))       # one seed only
    verdicts = table.compare_with_ce(runs)
    assert verdicts["hem"]["maxlogit/near"]["verdict"] == "holds"
    assert verdicts["mm"]["maxlogit/near"]["verdict"] == "does not hold"
    assert verdicts["dice"]["maxlogit/near"]["verdict"] == "not resolved at this scale"
    assert verdicts["dice"]["maxlogit/near"]["mean_difference"] == 0.0
    assert verdicts["logitnorm"]["maxlogit/near"]["verdict"] == "not resolved at this scale"
    summary = table.summarise(runs)
    assert summary["ce"]["seeds"] == [0, 1, 2] and len(summary["ce"]["msp"]["near"]["intervals"]) == 3
