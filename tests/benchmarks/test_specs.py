"""Benchmark specs: the built-in TOML files load, validate and agree with the catalogue; ``get``,
``from_toml`` and ``from_spec`` build benchmarks from fake data trees."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from oodbench import benchmarks
from oodbench.benchmarks.files import builtin_paths, parse_spec
from oodbench.benchmarks.standard import OodSetsBenchmark
from oodbench.data import ImageFolder, ImageList, catalog
from oodbench.data.imagenet import imagenet1k_wnids
from oodbench.data.imagenet_val import ImageNetVal
from oodbench.detectors import create
from oodbench.errors import ConfigError, InvalidInputError, MissingDataError, UnknownNameError
from oodbench.extract.activations import Activations

BUILTIN = ["mos-imagenet", "openood-v1.5-cifar10", "openood-v1.5-cifar100", "openood-v1.5-imagenet"]


def image(path: Path, value: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (value % 256, 30, 90)).save(path)


def test_builtin_specs_load_and_are_listed() -> None:
    assert sorted(builtin_paths()) == BUILTIN
    listed = benchmarks.available()
    assert set(listed) == {*BUILTIN, "cood"}
    assert "severity" in listed["cood"] and all(listed.values())
    for name in BUILTIN:
        spec = benchmarks.spec(name)
        assert spec.name == name and spec.description and spec.paper and spec.aggregate == "mean"


def test_openood_groups_follow_openood_v15() -> None:
    # DATA_INFO of OpenOOD v1.5 (openood/evaluation_api/datasets.py)
    expected = {
        "openood-v1.5-imagenet": ({"ssb_hard", "ninco"}, {"inaturalist", "textures", "openimage_o"}, 1000),
        "openood-v1.5-cifar10": ({"cifar100", "tin"}, {"mnist", "svhn", "texture", "places365"}, 10),
        "openood-v1.5-cifar100": ({"cifar10", "tin"}, {"mnist", "svhn", "texture", "places365"}, 100),
    }
    for name, (near, far, classes) in expected.items():
        spec = benchmarks.spec(name)
        kinds = spec.kinds
        assert {g for g, k in kinds.items() if k == "near"} == near
        assert {g for g, k in kinds.items() if k == "far"} == far
        assert spec.num_classes == classes and spec.headline[0] == "auroc"
        assert spec.id_val is not None and spec.ood_val is not None


def test_mos_reports_fpr_with_id_positive_and_auroc() -> None:
    spec = benchmarks.spec("mos-imagenet")
    assert [s.group for s in spec.ood] == ["inaturalist", "sun", "places", "textures"]
    assert spec.headline == ("fpr95_id", "auroc") and spec.kinds == {}
    assert spec.id.source == "imagenet-val"


def test_specs_agree_with_the_catalogue() -> None:
    for name in BUILTIN:
        spec = benchmarks.spec(name)
        for s in [spec.id, *spec.ood, spec.id_val, spec.ood_val]:
            if s is None:
                continue
            assert s.dataset is not None, f"{name}: set {s.group or 'id'} names no catalogue entry"
            info = catalog.get(s.dataset)
            if s.source == "imglist":
                lists = {lst.path: lst.images for lst in info.image_lists}
                if s.list in lists:  # OOD validation lists are not all in the catalogue
                    assert lists[s.list] == s.images, f"{name}: {s.list}"
                else:
                    assert s.list.split("/")[-1].startswith("val_"), f"{name}: {s.list} uncatalogued"


def test_unknown_benchmark_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        benchmarks.get("openood-imagenet")
    assert "openood-v1.5-imagenet" in err.value.close


def test_cood_is_built_lazily_by_get() -> None:
    from oodbench.benchmarks.cood import CoodBenchmark

    rng = np.random.default_rng(0)
    id_acts = Activations(logits=rng.normal(size=(6, 3)), labels=np.arange(6) % 3,
                          ids=np.asarray([f"i{i}" for i in range(6)]))
    pool = Activations(logits=rng.normal(size=(8, 3)), labels=np.arange(8) // 4,
                       ids=np.asarray([f"p{i}" for i in range(8)]))
    bench = benchmarks.get("cood", id_test=id_acts, ood_pool=pool, window=1, n_levels=2)
    assert isinstance(bench, CoodBenchmark)


def openood_imagenet_tree(root: Path) -> None:
    """A tiny OpenOOD data folder with every list of the openood-v1.5-imagenet spec."""
    spec = benchmarks.spec("openood-v1.5-imagenet")
    for k, s in enumerate([spec.id, spec.id_val, spec.ood_val, *spec.ood]):
        assert s is not None
        stem = Path(s.list).stem
        lines = []
        for i in range(3 + k):
            rel = f"{stem}/img_{i}.jpg"
            image(root / s.images / rel, value=40 * k + i)
            label = (7 * i) % 1000 if s in (spec.id, spec.id_val) else -1
            lines.append(f"{rel} {label}")
        (root / s.list).parent.mkdir(parents=True, exist_ok=True)
        (root / s.list).write_text("\n".join(lines) + "\n")


def test_openood_imagenet_from_a_fake_data_folder(tmp_path: Path) -> None:
    from oodbench.models.small_cnn import SmallCNN

    openood_imagenet_tree(tmp_path)
    bench = benchmarks.get("openood-v1.5-imagenet", root=tmp_path)
    assert isinstance(bench, OodSetsBenchmark) and isinstance(bench.id_test, ImageList)
    assert len(bench.id_test) == 3 and len(bench.id_val) == 4 and len(bench.ood_val) == 5
    assert {g: len(s) for g, s in bench.ood.items()} == {
        "ssb_hard": 6, "ninco": 7, "inaturalist": 8, "textures": 9, "openimage_o": 10
    }
    assert bench.headline == ("auroc", "fpr95_ood")
    table = bench.run(SmallCNN(1000, width=4), [create("msp")], device="cpu", num_workers=0,
                      progress=False)
    assert table["group"].tolist() == [*bench.ood, "near", "far", "all"]
    near = table.set_index("group").loc[["ssb_hard", "ninco"], "auroc"].mean()
    assert table.set_index("group").loc["near", "auroc"] == pytest.approx(near)


def test_mos_from_a_fake_data_folder(tmp_path: Path) -> None:
    wnids = imagenet1k_wnids()
    for i, c in enumerate((0, 5, 999)):
        image(tmp_path / "id_data/ILSVRC-2012/val" / wnids[c] / f"ILSVRC2012_val_{i + 1:08d}.JPEG")
    for folder, n in (("iNaturalist", 2), ("SUN", 3), ("Places", 4)):
        for i in range(n):
            image(tmp_path / "ood_data" / folder / "images" / f"{i}.jpg")
    for cls in ("banded", "dotted"):
        image(tmp_path / "ood_data/dtd/images" / cls / f"{cls}_0001.jpg")
    bench = benchmarks.get("mos-imagenet", root=tmp_path)
    assert isinstance(bench.id_test, ImageNetVal) and bench.id_test.labels.tolist() == [0, 5, 999]
    assert all(isinstance(s, ImageFolder) for s in bench.ood.values())
    assert {g: len(s) for g, s in bench.ood.items()} == {"inaturalist": 2, "sun": 3, "places": 4, "textures": 2}
    assert bench.kinds == {} and bench.headline == ("fpr95_id", "auroc")


def test_missing_data_says_where_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="root="):
        benchmarks.get("mos-imagenet")
    with pytest.raises(MissingDataError) as err:
        benchmarks.get("mos-imagenet", root=tmp_path)
    text = str(err.value)
    assert "set 'id'" in text and "oodbench data check imagenet-1k-val" in text
    with pytest.raises(InvalidInputError, match="root= and paths="):
        benchmarks.get("mos-imagenet", rot=tmp_path)


def test_paths_override_with_activations(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)

    def acts(n: int, labelled: bool) -> Activations:
        return Activations(logits=rng.normal(size=(n, 10)),
                           labels=rng.integers(0, 10, n) if labelled else np.full(n, -1),
                           ids=np.asarray([str(i) for i in range(n)]))

    spec = benchmarks.spec("openood-v1.5-cifar10")
    paths = {"id": acts(20, True), "id_val": acts(5, True), "ood_val": acts(5, False)}
    paths.update({s.group: acts(10, False) for s in spec.ood})
    bench = benchmarks.get("openood-v1.5-cifar10", paths=paths)
    table = bench.run(None, [create("energy")])
    assert table["group"].tolist() == [s.group for s in spec.ood] + ["near", "far", "all"]
    with pytest.raises(UnknownNameError):
        benchmarks.get("openood-v1.5-cifar10", paths={"cifar-100": acts(3, False)})


CUSTOM = """
name = "custom-folders"
description = "two folders"
headline = ["auroc", "fpr95_id"]

[id]
source = "folder"
path = "id"

[[ood]]
group = "noise"
kind = "far"
source = "folder"
path = "ood"
"""


def test_from_toml_resolves_paths_next_to_the_file(tmp_path: Path) -> None:
    for cls in ("a", "b"):
        image(tmp_path / "id" / cls / "0.png")
    image(tmp_path / "ood" / "x" / "0.png")
    (tmp_path / "bench.toml").write_text(CUSTOM)
    bench = benchmarks.from_toml(tmp_path / "bench.toml")
    assert bench.name == "custom-folders" and len(bench.id_test) == 2 and bench.kinds == {"noise": "far"}
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "bench.toml").write_text(CUSTOM)  # no id/ or ood/ next to this copy
    with pytest.raises(MissingDataError):
        benchmarks.from_toml(moved / "bench.toml")
    assert len(benchmarks.from_toml(moved / "bench.toml", root=tmp_path).ood["noise"]) == 1
    (moved / "rooted.toml").write_text('root = ".."\n' + CUSTOM)
    assert len(benchmarks.from_toml(moved / "rooted.toml").id_test) == 2


def base_spec() -> dict:
    return {
        "name": "t",
        "id": {"source": "folder", "path": "id"},
        "ood": [{"group": "a", "kind": "near", "source": "folder", "path": "a"}],
    }


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(headlines=["auroc"]), "unknown key 'headlines'; did you mean 'headline'"),
        (lambda s: s.pop("id"), r"\[id\]"),
        (lambda s: s.update(ood=[]), "at least one OOD set"),
        (lambda s: s["ood"].append(dict(s["ood"][0])), "repeat"),
        (lambda s: s["ood"][0].update(group="near"), "average rows"),
        (lambda s: s["ood"][0].update(kind="middle"), "kind"),
        (lambda s: s["ood"][0].update(source="tar"), "source"),
        (lambda s: s["ood"][0].update(source="imglist"), "needs `list` and `images`"),
        (lambda s: s["ood"][0].pop("group"), "group"),
        (lambda s: s["id"].update(kind="far"), "only OOD sets"),
        (lambda s: s.update(headline=["auc"]), "headline"),
        (lambda s: s.update(aggregate="max"), "aggregate"),
        (lambda s: s.update(num_classes=0), "num_classes"),
        (lambda s: s.pop("name"), "name"),
    ],
)
def test_invalid_specs(change, message) -> None:
    spec = base_spec()
    change(spec)
    with pytest.raises(InvalidInputError, match=message):
        parse_spec(spec)


def test_unknown_catalogue_dataset_in_a_spec() -> None:
    spec = base_spec()
    spec["ood"][0]["dataset"] = "dtdd"
    with pytest.raises(ConfigError, match="did you mean|Did you mean"):
        parse_spec(spec)


def test_a_typo_in_a_benchmark_file_names_the_file_the_key_and_the_closest_key(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text('name = "t"\n[id]\nsource = "folder"\npath = "id"\n'
                    '[[ood]]\ngroup = "a"\nsource = "folder"\npaht = "a"\n')
    with pytest.raises(ConfigError) as err:
        benchmarks.from_toml(path)
    assert str(err.value) == (f"{path}: [[ood]] #1: unknown key 'paht'; did you mean 'path'? "
                              "valid keys: source, path, list, images, group, kind, dataset")
    spec = base_spec()
    spec["ood"][0]["dataset"] = "dtdd"
    with pytest.raises(ConfigError, match=r"^benchmark spec: \[\[ood\]\] #1.dataset: unknown dataset "
                                          r"'dtdd'. Did you mean 'dtd'"):
        parse_spec(spec)


def test_from_spec_dict(tmp_path: Path) -> None:
    image(tmp_path / "id" / "c" / "0.png")
    image(tmp_path / "a" / "c" / "0.png")
    bench = benchmarks.from_spec(base_spec(), root=tmp_path)
    assert bench.name == "t" and list(bench.ood) == ["a"] and bench.kinds == {"a": "near"}
