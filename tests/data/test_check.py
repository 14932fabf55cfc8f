"""``check``: tiny fake trees of every layout, correct and in each way they go wrong.

Counts come from the catalogue entry, so each test checks a small copy against an entry whose
counts are replaced (``dataclasses.replace``) by the size of the fake tree.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from oodbench.data import catalog
from oodbench.data.catalog import Download, ImageListFile
from oodbench.data.check import check
from oodbench.data.imagenet import imagenet1k_wnids
from oodbench.errors import DataError, InvalidInputError, UnknownNameError


def image(path: Path, value: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (value, 10, 20)).save(path)
    return path


def class_tree(root: Path, classes: dict[str, int]) -> Path:
    for name, n in classes.items():
        for i in range(n):
            image(root / name / f"{i:04d}.png", value=i)
    return root


def kinds(report) -> list[str]:
    return [p.kind for p in report.problems]


TINY_DTD = replace(catalog.get("dtd"), num_images=6, num_classes=3)


def test_class_folders_ok(tmp_path: Path) -> None:
    report = check(TINY_DTD, class_tree(tmp_path, {"a": 2, "b": 2, "c": 2}))
    assert report.ok, report.summary()
    assert report.counts == {"classes": 3, "images": 6, "images decoded": 6}
    assert "OK" in report.summary()


def test_wrong_counts(tmp_path: Path) -> None:
    report = check(TINY_DTD, class_tree(tmp_path, {"a": 2, "b": 3}))
    assert kinds(report) == ["count", "count"]
    text = report.summary()
    assert "found 2 class folders, expected 3" in text and "found 5 images, expected 6" in text
    assert "oodbench data info dtd" in text


def test_nested_one_folder_too_deep(tmp_path: Path) -> None:
    class_tree(tmp_path / "dtd" / "images", {"a": 2, "b": 2, "c": 2})
    report = check(TINY_DTD, tmp_path / "dtd")
    assert kinds(report) == ["nested"]
    assert str(tmp_path / "dtd" / "images") in report.problems[0].fix
    report = check(TINY_DTD, tmp_path)  # two levels: dtd/images
    assert kinds(report) == ["nested"] and "images" in report.problems[0].message


def test_class_folders_missing(tmp_path: Path) -> None:
    for i in range(6):
        image(tmp_path / f"{i}.png")
    report = check(TINY_DTD, tmp_path)
    assert "layout" in kinds(report)
    assert "class folders are missing" in report.summary()


def test_tar_not_extracted(tmp_path: Path) -> None:
    class_tree(tmp_path / "src", {"a": 1})
    archive = tmp_path / "data" / "dtd-r1.0.1.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src", arcname="dtd")
    report = check(TINY_DTD, tmp_path / "data")
    assert kinds(report) == ["not-extracted"]
    assert f"tar -xf {archive}" in report.problems[0].fix


def test_path_is_the_archive_and_its_checksum_is_verified(tmp_path: Path) -> None:
    archive = tmp_path / "pack.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(image(tmp_path / "x.png"), arcname="x.png")
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    good = replace(TINY_DTD, downloads=(Download("pack.tar", md5=md5, checksum_source="test"),))
    report = check(good, archive)
    assert kinds(report) == ["not-extracted"]
    assert any("checksum matches" in n for n in report.notes)
    bad = replace(TINY_DTD, downloads=(Download("pack.tar", md5="0" * 32, checksum_source="test"),))
    assert kinds(check(bad, archive)) == ["checksum", "not-extracted"]


def test_per_class_tars_not_extracted(tmp_path: Path) -> None:
    for wnid in imagenet1k_wnids()[:3]:
        (tmp_path / f"{wnid}.tar").write_bytes(b"")
    info = replace(catalog.get("imagenet-1k-train"), num_images=3, num_classes=3)
    report = check(info, tmp_path)
    assert kinds(report) == ["not-extracted"] and "for f in n*.tar" in report.problems[0].fix


def test_imagenet_class_folders_must_be_wnids(tmp_path: Path) -> None:
    wnids = imagenet1k_wnids()
    class_tree(tmp_path, {wnids[0]: 1, wnids[1]: 1, "cats": 1})
    info = replace(catalog.get("imagenet-1k-train"), num_images=3, num_classes=3)
    report = check(info, tmp_path)
    assert kinds(report) == ["labels"]
    assert "998 missing" in report.summary() and "1 unexpected (cats)" in report.summary()


def test_empty_class_folder_and_missing_path(tmp_path: Path) -> None:
    class_tree(tmp_path, {"a": 3, "b": 3})
    (tmp_path / "c").mkdir()
    assert "missing-files" in kinds(check(TINY_DTD, tmp_path))
    report = check(TINY_DTD, tmp_path / "nope")
    assert kinds(report) == ["missing"] and "dtd-r1.0.1.tar.gz" in report.problems[0].fix


def test_corrupt_images_are_found_and_sampling(tmp_path: Path) -> None:
    class_tree(tmp_path, {"a": 2, "b": 2, "c": 1})
    full = image(tmp_path / "c" / "big.jpg")
    data = full.read_bytes()
    full.write_bytes(data[: len(data) // 2])  # a truncated JPEG
    report = check(TINY_DTD, tmp_path)
    assert kinds(report) == ["corrupt"] and "big.jpg" in report.problems[0].message
    assert check(TINY_DTD, tmp_path, sample=0).ok  # no decoding: counts are right
    sampled = check(TINY_DTD, tmp_path, sample=3, seed=0)
    assert sampled.counts["images decoded"] == 3
    with pytest.raises(InvalidInputError):
        check(TINY_DTD, tmp_path, sample=-1)


def test_image_folder_without_classes(tmp_path: Path) -> None:
    info = replace(catalog.get("mos-sun"), num_images=3)
    for i in range(3):
        image(tmp_path / "SUN" / "images" / f"sun_{i}.jpg")
    assert check(info, tmp_path / "SUN").ok
    assert kinds(check(replace(info, num_images=4), tmp_path / "SUN")) == ["count"]
    (tmp_path / "empty").mkdir()
    assert kinds(check(info, tmp_path / "empty")) == ["missing"]


def test_imagenet_val_layouts(tmp_path: Path) -> None:
    info = replace(catalog.get("imagenet-1k-val"), num_images=2, num_classes=2)
    for k in (1, 2):
        image(tmp_path / "val" / f"ILSVRC2012_val_{k:08d}.JPEG")
    report = check(info, tmp_path / "val")
    assert kinds(report) == ["labels"] and "no labels were found" in report.summary()
    (tmp_path / "val" / "labels.txt").write_text(
        "ILSVRC2012_val_00000001.JPEG 3\nILSVRC2012_val_00000002.JPEG 4\n"
    )
    assert check(info, tmp_path / "val").ok
    assert kinds(check(info, tmp_path)) == []  # root/val is looked into
    image(tmp_path / "val" / "stray.png")
    assert kinds(check(info, tmp_path / "val")) == ["labels"]  # an unlabelled file


def test_imagenet21k_tars_and_folders(tmp_path: Path) -> None:
    info = replace(catalog.get("imagenet-21k-winter21"), num_classes=3)
    with tarfile.open(tmp_path / "n00000001.tar", "w") as tar:
        tar.add(image(tmp_path / "x.JPEG"), arcname="n00000001_1.JPEG")
    (tmp_path / "x.JPEG").unlink()
    class_tree(tmp_path, {"n00000002": 2, "n00000003": 1})
    report = check(info, tmp_path)
    assert report.ok, report.summary()
    assert report.counts["per-synset tars"] == 1 and report.counts["images in folders"] == 3
    (tmp_path / "n00000004.tar").write_bytes(b"not a tar")
    assert kinds(check(info, tmp_path)) == ["count", "corrupt"]
    whole = replace(catalog.get("imagenet-21k-fall11"), num_classes=1)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "fall11_whole.tar").write_bytes(b"")
    assert kinds(check(whole, tmp_path / "other")) == ["not-extracted"]


def openood_tree(root: Path) -> catalog.DatasetInfo:
    lists = root / "benchmark_imglist" / "imagenet"
    lists.mkdir(parents=True)
    (lists / "test_ninco.txt").write_text("ninco/a/1.jpg -1\nninco/a/2.jpg -1\nninco/b/3.jpg -1\n")
    for rel in ("a/1.jpg", "a/2.jpg", "b/3.jpg"):
        image(root / "images_largescale" / "ninco" / rel)
    lst = ImageListFile("benchmark_imglist/imagenet/test_ninco.txt", "images_largescale", 3)
    return replace(catalog.get("openood-ninco"), image_lists=(lst,))


def test_image_lists_ok_and_missing_images(tmp_path: Path) -> None:
    info = openood_tree(tmp_path)
    assert check(info, tmp_path).ok
    (tmp_path / "images_largescale" / "ninco" / "b" / "3.jpg").unlink()
    report = check(info, tmp_path)
    assert kinds(report) == ["missing-files"] and "ninco/b/3.jpg" in report.problems[0].message


def test_image_lists_wrong_count_bad_line_missing_list(tmp_path: Path) -> None:
    info = openood_tree(tmp_path)
    wrong = replace(info, image_lists=(replace(info.image_lists[0], count=4),))
    assert kinds(check(wrong, tmp_path)) == ["count"]
    listed = tmp_path / info.image_lists[0].path
    listed.write_text("ninco/a/1.jpg\n")
    assert kinds(check(info, tmp_path)) == ["layout"]
    listed.unlink()
    assert kinds(check(info, tmp_path)) == ["missing"]


def test_image_lists_zip_not_extracted_and_nested(tmp_path: Path) -> None:
    info = openood_tree(tmp_path / "data")
    ninco = tmp_path / "data" / "images_largescale" / "ninco"
    for path in sorted(ninco.rglob("*.jpg")):
        path.unlink()
    for folder in sorted(ninco.iterdir()):
        folder.rmdir()
    ninco.rmdir()
    (tmp_path / "data" / "images_largescale" / "ninco.zip").write_bytes(b"PK")
    report = check(info, tmp_path / "data")
    assert kinds(report) == ["missing-files"] and "images_largescale/ninco.zip" in report.problems[0].fix
    assert kinds(check(info, tmp_path)) == ["nested"]


def cifar_tree(root: Path) -> catalog.DatasetInfo:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    manifest = {}
    for name in ("test_batch", "batches.meta"):
        (folder / name).write_bytes(name.encode())
        manifest[f"cifar-10-batches-py/{name}"] = hashlib.md5(name.encode()).hexdigest()
    return replace(catalog.get("cifar10"), manifest=manifest)


def test_cifar_python_manifest(tmp_path: Path) -> None:
    info = cifar_tree(tmp_path)
    assert check(info, tmp_path).ok and check(info, tmp_path / "cifar-10-batches-py").ok
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(b"changed")
    assert kinds(check(info, tmp_path)) == ["checksum"]
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    assert kinds(check(info, tmp_path)) == ["missing-files"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "cifar-10-python.tar.gz").write_bytes(b"")
    assert kinds(check(info, other)) == ["not-extracted"]


def test_unknown_name_and_raise_if_problems(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError):
        check("imagenet", tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        check(TINY_DTD, tmp_path / "nope").raise_if_problems()


def test_imagenet_val_missing_and_corrupt_files_are_reported_together(tmp_path: Path) -> None:
    """One pass: files the labels list but that are absent, and present files that do not
    decode, are both reported (the check does not stop at the missing ones)."""
    info = replace(catalog.get("imagenet-1k-val"), num_images=4, num_classes=3)
    for k in (1, 2):
        image(tmp_path / "val" / f"ILSVRC2012_val_{k:08d}.JPEG")
    (tmp_path / "val" / "ILSVRC2012_val_00000003.JPEG").write_bytes(b"truncated")
    (tmp_path / "val" / "labels.txt").write_text(
        "".join(f"ILSVRC2012_val_{k:08d}.JPEG {k}\n" for k in (1, 2, 3, 4))
    )
    report = check(info, tmp_path / "val")
    assert sorted(kinds(report)) == ["corrupt", "count", "missing-files"]
    summary = report.summary()
    assert "lists 1 images that are not in" in summary and "ILSVRC2012_val_00000004.JPEG" in summary
    assert "1 of 3 decoded images are corrupt" in summary and "ILSVRC2012_val_00000003" in summary
    assert report.counts["images"] == 3 and report.counts["images decoded"] == 3
