"""Planning: the grid, cell keys that change exactly when the settings do, pending cells."""

from __future__ import annotations

from oodbench import detectors
from oodbench.run.experiment import parse_experiment
from oodbench.run.plan import detector_configurations, make_plan


def experiment(detectors_: list, models: list | None = None, pool: tuple = (8, 9)):
    data = {
        "models": models or [{"name": "a", "spec": "timm:resnet18"}, {"name": "b", "spec": "timm:resnet34"}],
        "id": {"test": {"digits": [0, 1]}, "fit": {"digits": [0, 1]}},
        "benchmarks": [{"type": "cood", "pool": {"digits": list(pool)}, "window": 1},
                       {"type": "custom", "name": "c", "groups": {"x": {"digits": [7]}}}],
        "detectors": detectors_,
    }
    return parse_experiment(data)


def test_grid_size_and_grouping_by_model():
    plan = make_plan(experiment(["msp", {"name": "knn", "grid": {"k": [1, 5]}}]))
    assert len(plan.models) == 2
    assert [len(m.cells) for m in plan.models] == [6, 6]  # 3 detector configs x 2 benchmarks
    assert plan.summary() == "2 model(s) x 3 detector configuration(s) x 2 benchmark(s) = 12 cell(s)"
    keys = [c.key for c in plan.cells]
    assert len(set(keys)) == 12
    # knn reads features: every extraction of the model captures them once for all detectors
    assert plan.models[0].capture == ("features", "logits")
    assert make_plan(experiment(["msp"])).models[0].capture == ("features", "logits")


def test_hyperparams_are_complete_and_canonical():
    plan = make_plan(experiment([{"name": "knn", "hyperparams": {"k": 7}}]))
    cell = plan.cells[0]
    assert cell.params == detectors.create("knn", k=7).hyperparams
    assert cell.label().startswith("a · cood · knn (")


def test_keys_are_stable_and_change_with_any_setting():
    base = {c.key for c in make_plan(experiment(["msp"])).cells}
    assert base == {c.key for c in make_plan(experiment(["msp"])).cells}
    changed_hp = {c.key for c in make_plan(experiment([{"name": "energy", "hyperparams": {"temperature": 2.0}}])).cells}
    default_hp = {c.key for c in make_plan(experiment(["energy"])).cells}
    assert changed_hp.isdisjoint(default_hp)
    # another C-OOD pool: new C-OOD cells, the custom benchmark's cells are unchanged
    plan = make_plan(experiment(["msp"]))
    moved = make_plan(experiment(["msp"], pool=(7, 9)))
    same = {c.key for c in plan.cells} & {c.key for c in moved.cells}
    assert same == {c.key for c in plan.cells if c.benchmark.name == "c"} and len(same) == 2


def test_weights_content_enters_the_key(tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"one")
    models = [{"name": "a", "spec": "timm:resnet18", "weights": str(weights)}]
    first = {c.key for c in make_plan(experiment(["msp"], models=models)).cells}
    weights.write_bytes(b"two")
    second = {c.key for c in make_plan(experiment(["msp"], models=models)).cells}
    assert first.isdisjoint(second)


def test_pending_drops_finished_cells_and_empty_models():
    plan = make_plan(experiment(["msp"]))
    model_a = {c.key for c in plan.models[0].cells}
    pending = plan.pending(model_a)
    assert [m.model.name for m in pending.models] == ["b"]
    assert plan.pending({c.key for c in plan.cells}).models == ()


def test_all_expands_to_every_registered_detector_but_clip_and_group_softmax_ones():
    configs = detector_configurations(experiment(["all", "msp"]))
    names = [c.name for c in configs]
    registered = [r for r in detectors.available()]
    expected = [r["name"] for r in registered
                if not {"text_embeddings", "groups"} & set(r["requires"])]
    # "msp", named by its own entry, is left out of "all" and comes where that entry stands
    assert names == [n for n in expected if n != "msp"] + ["msp"]
    assert all(c.params == detectors.create(c.name).hyperparams and not c.preset for c in configs)


def test_all_leaves_out_the_detectors_other_entries_configure():
    """So the demo's "all" plus knn with k = 5 runs knn once, with k = 5 (issue 23 item 9)."""
    configs = detector_configurations(experiment(["all", {"name": "knn", "hyperparams": {"k": 5}}]))
    assert [c.params["k"] for c in configs if c.name == "knn"] == [5]


def test_all_under_a_protocol_is_the_detectors_it_configures():
    from oodbench.run.experiment import parse_experiment
    from tests.run.test_experiment import minimal

    exp = parse_experiment(minimal(experiment={"name": "t", "protocol": "cood"}, detectors=["all"]))
    configs = detector_configurations(exp)
    assert [(c.name, c.preset) for c in configs] == [
        ("entropy", "cood"), ("maxlogit", "cood"), ("mc_dropout", "cood"), ("msp", "cood"),
        ("odin", "cood")]
    plan = make_plan(exp)
    assert {c.preset for c in plan.cells} == {"cood"}
    plain = make_plan(parse_experiment(minimal(detectors=["odin"])))
    coded = make_plan(parse_experiment(minimal(detectors=[{"name": "odin", "protocol": "cood"}])))
    assert {c.key for c in plain.cells}.isdisjoint({c.key for c in coded.cells})
