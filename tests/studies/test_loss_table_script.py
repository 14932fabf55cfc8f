"""The loss-table study's bookkeeping (studies/loss_table.py) on synthetic logits."""

import json

import numpy as np
import pytest

from oodbench.config import cache_dir
from oodbench.metrics.delong import auroc_ci
from tests._scripts import load_script


@pytest.fixture(scope="module")
def table():
    return load_script("studies/loss_table.py")


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


def test_plan_runs_ce_seeds_first_then_one_seed_of_every_loss(table):
    order = table.plan(["ce", "logitnorm", "hem"], [0, 1])
    assert order == [("ce", 0), ("ce", 1), ("logitnorm", 0), ("hem", 0), ("logitnorm", 1),
                     ("hem", 1)]
    assert table.plan(["hem"], [0, 1]) == [("hem", 0), ("hem", 1)]


def test_a_run_another_worker_holds_is_skipped_not_trained(table, monkeypatch):
    import fcntl

    import torch

    from oodbench.train.recipe import Recipe
    from oodbench.train.tensor_images import TensorImages

    train = TensorImages(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), torch.tensor([0, 1, 0, 1]),
                         ("a", "b"), "tiny")
    recipe, data = Recipe().scaled(epochs=1), {"train": train}
    _, folder = table.run_folder(recipe, data, "ce", 0)
    folder.mkdir(parents=True)
    monkeypatch.setattr(table, "_train_and_evaluate", lambda *a: pytest.fail("trained"))
    with open(folder / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # this open file description is the "other worker"
        assert table.one_run(recipe, data, "ce", 0, "cpu", wait=False) is None
    logits = _logits(np.random.default_rng(3), 1.0)
    np.savez(folder / "logits.npz", **logits)
    (folder / "record.json").write_text(json.dumps({"loss": "ce", "seed": 0}))
    assert table.one_run(recipe, data, "ce", 0, "cpu", wait=False)["loss"] == "ce"  # read back


def test_timing_and_statements_say_what_was_run(table):
    rng = np.random.default_rng(4)
    runs = []
    for seed, start, end in ((0, "2026-01-01T10:00:00+00:00", "2026-01-01T10:10:00+00:00"),
                             (1, "2026-01-01T10:05:00+00:00", "2026-01-01T10:20:00+00:00")):
        record = _store(table, "ce", seed, _logits(rng, 2.0))
        runs.append({**record, "started_at": start, "finished_at": end, "train_seconds": 500.0,
                     "train_cpu_seconds": 400.0, "eval_seconds": 10.0, "eval_cpu_seconds": 8.0})
    runs.append(_store(table, "hem", 0, _logits(rng, 2.0)))
    runs[-1].update(started_at="2026-01-01T10:10:00+00:00", finished_at="2026-01-01T10:30:00+00:00",
                    train_seconds=600.0, train_cpu_seconds=300.0, eval_seconds=5.0,
                    eval_cpu_seconds=4.0)
    timing = table.study_timing(runs, table.plan(["ce", "hem"], [0, 1, 2]))
    assert timing["runs_done"] == ["ce/0", "ce/1", "hem/0"]
    assert timing["runs_missing"] == ["ce/2", "hem/1", "hem/2"]
    assert timing["cpu_seconds_summed"] == 2 * 408.0 + 304.0
    assert timing["wall_seconds_summed"] == 2 * 510.0 + 605.0
    assert timing["span_seconds"] == 30 * 60.0
    summary = table.summarise(runs)
    said = table.statements(summary, table.compare_with_ce(runs))
    accuracies = [r["id_accuracy"] for r in runs[:2]]
    assert said["ce_id_accuracy"]["met"] == (min(accuracies) >= 0.85)
    assert said["ce_msp_near_above_chance"]["met"] is True  # separation 2.0 on 400 / 300 rows
    assert said["accuracy_minus_ce_points"]["hem"] == pytest.approx(
        100 * (runs[2]["id_accuracy"] - np.mean(accuracies)))
    sentence = said["published_comparisons"]["hem"]
    assert sentence.startswith("HEM vs CE (published: HEM better than CE;")
    assert "1 seed," in sentence and sentence.endswith("not resolved at this scale.")


def test_a_loss_name_typo_stops_before_any_data_is_read(table, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["loss_table.py", "--losses", "ce,logitnrom",
                                     "--data-root", "/nonexistent"])
    with pytest.raises(SystemExit) as stop:
        table.main()
    message = str(stop.value)
    assert "Did you mean 'logitnorm'" in message and "\n" not in message


def test_unfinished_runs_are_reported_as_progress_not_results(table):
    import torch

    from oodbench.train.recipe import Recipe
    from oodbench.train.tensor_images import TensorImages

    train = TensorImages(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), torch.tensor([0, 1, 1, 0]),
                         ("a", "b"), "tiny-progress")
    recipe, data = Recipe().scaled(epochs=10), {"train": train}
    folder = table.run_folder(recipe, data, "hem", 1)[1] / "checkpoint"
    folder.mkdir(parents=True)
    history = [{"train_accuracy": 0.4, "seconds": 30.0, "cpu_seconds": 20.0},
               {"train_accuracy": 0.5, "seconds": 40.0, "cpu_seconds": 21.0}]
    (folder / "train.json").write_text(json.dumps({"history": history}))
    [progress] = table.in_progress(recipe, data, [("ce", 0), ("hem", 1)])
    assert progress == {"loss": "hem", "seed": 1, "epochs_done": 2, "epochs": 10,
                        "train_accuracy_per_epoch": [0.4, 0.5], "train_seconds": 70.0,
                        "train_cpu_seconds": 41.0}
