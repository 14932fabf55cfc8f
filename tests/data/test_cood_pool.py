"""Building the C-OOD pool from a tiny fake ImageNet-21k tree of real wnids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from oodbench.cli.main import main
from oodbench.data.cood_pool import RULES, build_pool, pool_source, read_wnid_list
from oodbench.data.imagenet import info_dir
from oodbench.errors import DataError, EmptyInputError, InvalidInputError, MissingDataError

TENCH = "n01440764"  # ImageNet-1k class
DOG = "n02084071"  # ancestor of the 118 ImageNet-1k dog breeds
LION_CUB = "n01322898"  # descendant of ImageNet-1k "lion"
STORM_DOOR = "n04329834"  # unrelated; excluded by the user
SHREW = "n01892030"  # unrelated; too few images
KEPT = ["n10040945", "n10509810", "n12139793", "n12450607"]  # unrelated to ImageNet-1k


def _tree(root: Path, counts: dict[str, int]) -> Path:
    for wnid, n in counts.items():
        folder = root / wnid
        folder.mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (4, 4), (i * 9 % 256, 0, 0)).save(folder / f"{wnid}_{i}.JPEG", "PNG")
        (folder / "notes.txt").write_text("not an image")
    (root / "not_a_wnid").mkdir()
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    counts = {TENCH: 8, DOG: 8, LION_CUB: 8, STORM_DOOR: 8, SHREW: 3}
    counts.update({w: 6 + i for i, w in enumerate(KEPT)})
    return _tree(tmp_path / "in21k", counts)


def test_build_pool_rules_counts_and_sampling(tree: Path, tmp_path: Path) -> None:
    exclusions = tmp_path / "exclude.txt"
    exclusions.write_text(f"# hand-picked\n{STORM_DOOR}  storm door\n\n")
    report = build_pool(tree, out=tmp_path / "pool.txt", min_images=5, seed=0,
                        exclude=[exclusions])
    assert report.classes == sorted(KEPT)
    assert all(len(report.files[w]) == 5 for w in KEPT)
    assert report.removed["excluded"] == [STORM_DOOR]
    assert report.removed["too_few_images"] == [SHREW]
    assert TENCH in report.removed["imagenet1k"]
    assert DOG in report.removed["hierarchy"] and LION_CUB in report.removed["hierarchy"]
    # the 21k list from timm, read independently: every synset is kept or removed by one rule
    goog = (info_dir() / "imagenet21k_goog_synsets.txt").read_text().split()
    in1k = set((info_dir() / "imagenet_synsets.txt").read_text().split())
    assert report.candidates == len(goog)
    assert len(report.removed["imagenet1k"]) == len(in1k & set(goog))
    assert sum(len(v) for v in report.removed.values()) + len(KEPT) == len(goog)
    assert len(report.removed["missing"]) == len(goog) - len(report.removed["imagenet1k"]) - len(
        report.removed["hierarchy"]) - 1 - 1 - len(KEPT)

    # the image list: "<wnid>/<file> <label>", label = index in the sorted kept wnids
    lines = (tmp_path / "pool.txt").read_text().splitlines()
    assert len(lines) == 5 * len(KEPT) == report.n_images
    for line in lines:
        path, label = line.rsplit(" ", 1)
        assert path.split("/")[0] == sorted(KEPT)[int(label)]
        assert (tree / path).is_file() and path.endswith(".JPEG")
    assert (tmp_path / "pool_classes.txt").read_text().split() == sorted(KEPT)

    summary = report.summary()
    for rule in RULES:
        assert f"removed by {rule}" in summary
    assert f"kept: 4 classes, {5 * len(KEPT)} images" in summary


def test_sampling_is_seeded_per_class(tree: Path) -> None:
    a = build_pool(tree, min_images=5, seed=0)
    b = build_pool(tree, min_images=5, seed=0, exclude=[KEPT[0]])
    c = build_pool(tree, min_images=5, seed=1)
    assert a.files == build_pool(tree, min_images=5, seed=0).files
    # removing one class does not change the images sampled for the others
    assert all(a.files[w] == b.files[w] for w in KEPT[1:])
    # the class with 9 images gets a different sample under another seed
    assert a.files[KEPT[3]] != c.files[KEPT[3]]
    # a class with exactly min_images images keeps all of them
    assert build_pool(tree, min_images=6, seed=3).files[KEPT[0]] == [
        f"{KEPT[0]}/{KEPT[0]}_{i}.JPEG" for i in range(6)
    ]


def test_hierarchy_rule_can_be_turned_off(tree: Path) -> None:
    report = build_pool(tree, min_images=5, exclude_hierarchy=False)
    assert report.removed["hierarchy"] == []
    assert DOG in report.classes and LION_CUB in report.classes and TENCH not in report.classes


def test_pool_source_reads_back_as_a_labelled_source(tree: Path, tmp_path: Path) -> None:
    build_pool(tree, out=tmp_path / "pool.txt", min_images=5)  # storm door is kept here
    src = pool_source(tmp_path / "pool.txt", tree)
    assert len(src) == 25 and list(src.class_names or []) == sorted([*KEPT, STORM_DOOR])
    assert np.bincount(src.labels).tolist() == [5] * 5
    assert src.load(0).size == (4, 4)
    (tmp_path / "pool_classes.txt").unlink()
    with pytest.raises(MissingDataError, match="pool_classes.txt"):
        pool_source(tmp_path / "pool.txt", tree)


def test_errors(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match="does not exist"):
        build_pool(tmp_path / "absent")
    empty = tmp_path / "empty"
    (empty / "junk").mkdir(parents=True)
    with pytest.raises(DataError, match="no folder named after an ImageNet-21k wnid"):
        build_pool(empty)
    with pytest.raises(EmptyInputError, match="no class"):
        build_pool(tree, min_images=100)
    with pytest.raises(InvalidInputError, match="min_images"):
        build_pool(tree, min_images=1)
    bad = tmp_path / "bad.txt"
    bad.write_text("storm door\n")
    with pytest.raises(InvalidInputError, match="not WordNet noun ids"):
        read_wnid_list(bad)


def test_cli_build(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli" / "pool.txt"
    result = CliRunner().invoke(main, [
        "cood-pool", "build", "--imagenet21k", str(tree), "--out", str(out), "--min-images", "5",
        "--exclude", STORM_DOOR,
    ])
    assert result.exit_code == 0, result.output
    assert "removed by excluded      : 1" in result.output
    assert "removed by too_few_images: 1" in result.output
    assert "kept: 4 classes, 20 images" in result.output
    assert len(out.read_text().splitlines()) == 20
    missing = CliRunner().invoke(main, ["cood-pool", "build", "--imagenet21k",
                                        str(tmp_path / "nope"), "--out", str(out)])
    assert missing.exit_code == 2 and "does not exist" in missing.output
