"""Experiment files: parsing into dataclasses and errors that name the field and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from oodbench.errors import InvalidInputError, MissingDataError
from oodbench.run.build import build_benchmark, build_source, load_model
from oodbench.run.experiment import (
    CoodSpec,
    CustomSpec,
    ExperimentError,
    StandardSpec,
    load_experiment,
    parse_experiment,
)
from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def minimal(**overrides) -> dict:
    data = {
        "experiment": {"name": "t", "output": "out"},
        "models": [{"spec": "timm:resnet18", "pretrained": False}],
        "id": {"test": {"digits": [0, 1, 2]}},
        "benchmarks": [{"type": "cood", "pool": {"digits": [7, 8, 9]}, "window": 1}],
        "detectors": ["msp"],
    }
    data.update(overrides)
    return data


def test_the_example_files_parse():
    exp = load_experiment(REPO / "examples" / "experiment.toml", check_paths=False)
    assert [b.type for b in exp.benchmarks] == ["cood", "standard", "custom"]
    assert [m.name for m in exp.models] == ["timm:resnet50", "vit-b16", "efficientnet_lite0"]
    knn = next(d for d in exp.detectors if d.name == "knn")
    assert knn.configurations() == [{"k": 10}, {"k": 50}, {"k": 100}]
    assert exp.batch_size == 128 and exp.amp == "auto"
    custom = exp.benchmarks[2]
    assert isinstance(custom, CustomSpec) and custom.groups["sketches"].kind == "near"
    assert exp.text.startswith("# An oodbench experiment")


def test_defaults_and_relative_paths(tmp_path):
    (tmp_path / "val").mkdir()
    data = minimal(id={"test": {"folder": "val"}})
    exp = parse_experiment(data, base_dir=tmp_path)
    assert exp.output == (tmp_path / "out").resolve()
    assert exp.id_test is not None and exp.id_test.path == (tmp_path / "val").resolve()
    assert exp.device == "auto" and exp.batch_size == 64 and exp.num_workers == "auto"
    bench = exp.benchmarks[0]
    assert isinstance(bench, CoodSpec) and bench.name == "cood" and bench.options == {"window": 1}
    assert exp.models[0].name == "timm:resnet18" and exp.models[0].pretrained is False
    assert exp.detectors[0].name == "msp" and exp.detectors[0].configurations() == [{}]


def test_grid_is_a_cartesian_product_over_fixed_hyperparams():
    data = minimal(detectors=[{"name": "vra", "hyperparams": {"gamma": 0.5},
                               "grid": {"lower_percentile": [50, 60], "upper_percentile": [90, 95]}}])
    spec = parse_experiment(data).detectors[0]
    configs = spec.configurations()
    assert len(configs) == 4 and all(c["gamma"] == 0.5 for c in configs)
    assert {(c["lower_percentile"], c["upper_percentile"]) for c in configs} == {
        (50, 90), (50, 95), (60, 90), (60, 95)}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"experiment": {"batchsize": 3}}, r"\[experiment\]: unknown key 'batchsize'; did you mean 'batch_size'"),
        ({"experiment": {"batch_size": 0}}, r"batch_size: must be a positive integer"),
        ({"experiment": {"amp": "yes"}}, r"amp: use one of auto, off, bf16, fp16"),
        ({"experiment": {"batch_size": "64"}}, r"batch_size: expected int"),
        ({"models": []}, r"\[\[models\]\]: the experiment needs at least one model"),
        ({"models": [{"spec": "timm:a", "factory": "x:y"}]}, r"exactly one of spec"),
        ({"models": [{"factory": "nocolon"}]}, r"factory: expected 'package.module:callable'"),
        ({"models": ["timm:a", "timm:a"]}, r"appear twice"),
        ({"detectors": ["mps"]}, r"\[\[detectors\]\] #1: unknown detector 'mps'. Did you mean 'msp'"),
        ({"detectors": [{"name": "knn", "hyperparams": {"kk": 3}}]}, r"has no hyper-parameter kk"),
        ({"detectors": [{"name": "knn", "grid": {"k": 5}}]}, r"grid.k: expected a non-empty array"),
        ({"detectors": [{"name": "all", "grid": {"k": [1]}}]}, r"\"all\" takes no hyperparams"),
        ({"benchmarks": [{"type": "severity"}]}, r"unknown benchmark type 'severity'"),
        ({"benchmarks": [{"type": "cood"}]}, r"missing required key 'pool'"),
        ({"benchmarks": [{"type": "cood", "pool": {"digits": [9]}, "estimation_fraction": 1.5}]},
         r"estimation_fraction: must lie in \(0, 1\)"),
        ({"benchmarks": [{"type": "cood", "pool": {"digits": [9]}, "selection": "best"}]},
         r"selection: use \"percentiles\" \(the paper\) or \"disjoint\""),
        ({"benchmarks": [{"type": "standard", "name": "cood"}]}, r"type = \"cood\" with a pool"),
        ({"benchmarks": [{"type": "standard", "name": "openood-v15-imagenet"}]},
         r"unknown benchmark 'openood-v15-imagenet'. Did you mean 'openood-v1.5-imagenet'"),
        ({"benchmarks": [{"type": "custom", "groups": {"a": {"digits": [9], "kind": "middle"}}}]},
         r"groups.a.kind: expected one of \('near', 'far'\)"),
        ({"id": {}}, r"\[id\]: benchmark\(s\) \['cood'\] compare against the ID test set"),
        ({"id": {"test": {"folder": "a", "list": "b"}}}, r"\[id\].test: give exactly one of"),
        ({"id": {"test": {"demo": "id_tset"}}}, r"unknown demo source 'id_tset'. Did you mean 'id_test'"),
        ({"surprise": 1}, r"top level: unknown key 'surprise'"),
    ],
)
def test_mistakes_name_the_field_and_the_fix(change, message):
    data = minimal()
    for key, value in change.items():
        data[key] = {**data[key], **value} if key == "experiment" else value
    with pytest.raises(ExperimentError, match=message):
        parse_experiment(data, file="exp.toml")


def test_missing_paths_say_what_was_expected(tmp_path):
    with pytest.raises(MissingDataError, match=r"\[id\].test: folder .* does not exist; expected an image folder"):
        parse_experiment(minimal(id={"test": {"folder": "nowhere"}}), base_dir=tmp_path)
    with pytest.raises(MissingDataError, match="expected a text file of 'relative/path label' lines"):
        parse_experiment(minimal(id={"test": {"list": "nowhere.txt"}}), base_dir=tmp_path)
    with pytest.raises(MissingDataError, match=r"weights: .* does not exist; expected a checkpoint"):
        parse_experiment(minimal(models=[{"spec": "timm:resnet18", "weights": "w.pt"}]), base_dir=tmp_path)
    # the same file validates when the paths are not checked (written for another machine)
    parse_experiment(minimal(id={"test": {"folder": "nowhere"}}), base_dir=tmp_path, check_paths=False)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(MissingDataError, match="experiment file .* does not exist"):
        load_experiment(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment\nname = 1\n")
    with pytest.raises(ExperimentError, match="not valid TOML"):
        load_experiment(bad)


def test_standard_benchmark_and_custom_groups(tmp_path):
    for name in ("sk", "far"):
        (tmp_path / name).mkdir()
    data = minimal(benchmarks=[
        {"type": "standard", "name": "openood-v1.5-imagenet", "options": {"root": "/data"}},
        {"type": "custom", "name": "mine",
         "groups": {"sketch": {"folder": "sk", "kind": "near"}, "other": {"folder": "far"}}},
    ])
    std, custom = parse_experiment(data, base_dir=tmp_path).benchmarks
    assert isinstance(std, StandardSpec) and std.options == {"root": "/data"}
    assert isinstance(custom, CustomSpec)
    assert {g: s.kind for g, s in custom.groups.items()} == {"sketch": "near", "other": "far"}


def test_describe_is_json_and_round_trips_the_choices(tmp_path):
    exp = load_experiment(REPO / "examples" / "tiny_experiment.toml", check_paths=False)
    described = exp.describe()
    assert described["models"][0]["factory"] == "oodbench.models.small_cnn:SmallCNN"
    assert described["benchmarks"][1]["groups"]["stripes"]["kind"] == "near"
    raw = tomllib.loads(Path(REPO / "examples" / "tiny_experiment.toml").read_text())
    assert len(exp.detectors) == len(raw["detectors"])


def test_factory_must_return_a_classifier():
    exp = parse_experiment(minimal(models=[{"factory": "collections:OrderedDict"}]))
    with pytest.raises(ExperimentError, match="not an oodbench Classifier; wrap a plain nn.Module"):
        load_model(exp.models[0])
    exp = parse_experiment(minimal(models=[{"factory": "no_such_module_x:f"}]))
    with pytest.raises(ExperimentError, match="cannot import factory"):
        load_model(exp.models[0])


def test_protocols_at_the_experiment_and_detector_level():
    exp = parse_experiment(minimal(experiment={"name": "t", "protocol": "openood"},
                                   detectors=["react", {"name": "knn", "protocol": "paper"},
                                              {"name": "entropy", "protocol": ""}],
                                   id={"test": {"digits": [0, 1, 2]}, "val": {"digits": [0, 1, 2]}}))
    assert exp.protocol == "openood" and exp.id_val is not None
    assert [d.chosen_preset(exp.protocol) for d in exp.detectors] == ["openood", "paper", None]
    assert exp.describe()["id"]["val"] == {"kind": "digits", "classes": [0, 1, 2]}
    with pytest.raises(ExperimentError, match=r"\[\[detectors\]\] #1.*no 'openood' preset.*protocol = \"\""):
        parse_experiment(minimal(experiment={"name": "t", "protocol": "openood"}, detectors=["entropy"]))
    with pytest.raises(ExperimentError, match="Did you mean 'openood'"):
        parse_experiment(minimal(experiment={"name": "t", "protocol": "opendood"}))
    with pytest.raises(ExperimentError, match="no 'cood' preset"):
        parse_experiment(minimal(detectors=[{"name": "knn", "protocol": "cood"}]))


def _classes(root: Path, names: list[str]) -> Path:
    import numpy as np
    from PIL import Image

    for i, name in enumerate(names):
        (root / name).mkdir(parents=True)
        Image.fromarray(np.full((4, 4, 3), 40 * i, dtype=np.uint8)).save(root / name / "0.png")
    return root


def test_class_names_and_label_maps_give_the_labels(tmp_path):
    _classes(tmp_path / "val", ["zebra_pics", "apple_pics"])
    (tmp_path / "order.txt").write_text("n0\napple_pics\nzebra_pics\n")
    cases = {
        "by_file": ({"folder": "val", "class_names": "order.txt"}, [2, 1]),
        "by_array": ({"folder": "val", "class_names": ["zebra_pics", "apple_pics"]}, [0, 1]),
        "by_map": ({"folder": "val", "label_map": {"zebra_pics": 340, "apple_pics": 948}},
                   [340, 948]),
        "folder_positions": ({"folder": "val"}, [1, 0]),  # sorted: apple_pics, zebra_pics
    }
    for name, (spec, labels) in cases.items():
        exp = parse_experiment(minimal(id={"test": spec}), base_dir=tmp_path)
        source = build_source(exp.id_test)
        by_id = dict(zip(source.ids, source.labels.tolist()))
        assert [by_id["zebra_pics/0.png"], by_id["apple_pics/0.png"]] == labels, name
    described = parse_experiment(minimal(id={"test": cases["by_map"][0]}), base_dir=tmp_path)
    assert described.id_test.describe()["label_map"] == {"zebra_pics": 340, "apple_pics": 948}
    partial = parse_experiment(minimal(id={"test": {"folder": "val", "label_map": {"zebra_pics": 3}}}),
                               base_dir=tmp_path)
    with pytest.raises(InvalidInputError, match=r"no model class index for the classes \['apple_pics'\]"):
        build_source(partial.id_test)
    with pytest.raises(MissingDataError, match="class_names file .*missing.txt does not exist"):
        parse_experiment(minimal(id={"test": {"folder": "val", "class_names": "missing.txt"}}),
                         base_dir=tmp_path)


def test_a_folder_with_images_and_a_labels_file_is_read_with_its_labels(tmp_path):
    import numpy as np
    from PIL import Image

    (tmp_path / "set" / "images").mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(tmp_path / "set" / "images" / f"{i}.png")
    (tmp_path / "set" / "labels.txt").write_text("0.png 5\n1.png 7\n2.png 9\n")
    exp = parse_experiment(minimal(id={"test": {"folder": "set"}}), base_dir=tmp_path)
    assert build_source(exp.id_test).labels.tolist() == [5, 7, 9]


def test_interval_options_of_every_benchmark_type(tmp_path):
    (tmp_path / "far").mkdir()
    data = minimal(benchmarks=[
        {"type": "cood", "pool": {"digits": [7, 8, 9]}, "window": 1, "n_levels": 2,
         "n_bootstrap": 200},
        {"type": "custom", "name": "mine", "groups": {"g": {"folder": "far"}}, "ci": False},
        {"type": "standard", "name": "openood-v1.5-imagenet", "options": {"root": "/data"}},
    ])
    cood, custom, std = parse_experiment(data, base_dir=tmp_path).benchmarks
    assert (cood.ci, cood.n_bootstrap) == (True, 200)
    assert (custom.ci, custom.n_bootstrap) == (False, 0)
    assert (std.ci, std.n_bootstrap) == (True, 0)
    assert cood.describe()["intervals"] == {"ci": True, "n_bootstrap": 200}
    assert "intervals" not in std.describe()  # defaults keep the cell keys of older results
    bench = build_benchmark(cood, build_source(parse_experiment(data, base_dir=tmp_path).id_test))
    assert (bench.ci, bench.n_bootstrap) == (True, 200)
    bad = minimal(benchmarks=[{"type": "cood", "pool": {"digits": [9]}, "n_bootstrap": -1}])
    with pytest.raises(ExperimentError, match=r"n_bootstrap: must be 0 \(off\)"):
        parse_experiment(bad, file="exp.toml")
    typo = minimal(benchmarks=[{"type": "cood", "pool": {"digits": [9]}, "n_boostrap": 10}])
    with pytest.raises(ExperimentError, match="did you mean 'n_bootstrap'"):
        parse_experiment(typo, file="exp.toml")


def test_protocol_is_the_deprecated_name_of_preset(tmp_path):
    """``protocol`` (experiment and detector level) still works, with a warning naming the file
    and the new key, and plans the very cells ``preset`` does."""
    import warnings

    from oodbench.run.plan import make_plan
    from oodbench.schema import DeprecatedKeyWarning

    text = (REPO / "examples" / "experiment.toml").read_text()
    assert 'preset = "cood_code"' in text
    old = tmp_path / "old.toml"
    old.write_text(text.replace('preset = "cood_code"', 'protocol = "cood_code"'))
    with pytest.warns(DeprecatedKeyWarning, match=r"old.toml: \[\[detectors\]\] 'odin': the key "
                      r"'protocol' is deprecated; call it 'preset'"):
        before = load_experiment(old, check_paths=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecatedKeyWarning)
        now = load_experiment(REPO / "examples" / "experiment.toml", check_paths=False)
    odin = next(d for d in now.detectors if d.name == "odin")
    assert odin.preset == "cood_code" == next(d for d in before.detectors if d.name == "odin").preset
    assert [c.key for c in make_plan(before).cells] == [c.key for c in make_plan(now).cells]
    with pytest.warns(DeprecatedKeyWarning, match=r"\[experiment\]: the key 'protocol'"):
        exp = parse_experiment(minimal(experiment={"name": "t", "protocol": "paper"}))
    assert exp.preset == "paper" == exp.protocol
    with pytest.raises(ExperimentError, match="give preset only"):
        parse_experiment(minimal(detectors=[{"name": "knn", "preset": "paper", "protocol": "paper"}]))
