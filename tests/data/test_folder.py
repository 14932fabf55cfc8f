"""ImageFolder: layout, labels, strict decoding (corrupt, truncated, missing) and fingerprints."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from oodbench.data import ImageFolder, OodFolder
from oodbench.errors import CorruptImageError, EmptyInputError, InvalidInputError, MissingDataError


def write_image(path: Path, seed: int, size: int = 8, fmt: str | None = None) -> np.ndarray:
    """A random RGB image saved at ``path``; returns its pixels."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, format=fmt)
    return pixels


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "set"
    write_image(root / "cat" / "b.png", 1)
    write_image(root / "cat" / "a.png", 2)
    write_image(root / "cat" / "sub" / "c.jpg", 3)
    write_image(root / "dog" / "x.JPEG", 4)
    (root / "dog" / "notes.txt").write_text("not an image")
    write_image(root / "loose.png", 5)  # directly in the root: ignored, as in torchvision
    return root


def test_layout_labels_and_ids(tree: Path) -> None:
    src = ImageFolder(tree)
    assert src.class_names == ["cat", "dog"]
    assert src.class_to_idx == {"cat": 0, "dog": 1}
    assert src.ids == ["cat/a.png", "cat/b.png", "cat/sub/c.jpg", "dog/x.JPEG"]
    assert src.labels.tolist() == [0, 0, 0, 1]
    assert src.labels.dtype == np.int64
    assert len(src) == 4 and src.name == "set"


def test_load_returns_the_exact_rgb_pixels(tmp_path: Path) -> None:
    pixels = write_image(tmp_path / "r" / "k" / "img.png", 7)
    grey = np.arange(64, dtype=np.uint8).reshape(8, 8)
    Image.fromarray(grey).save(tmp_path / "r" / "k" / "img_grey.png")
    src = ImageFolder(tmp_path / "r")
    rgb = src.load(0)
    assert rgb.mode == "RGB" and np.array_equal(np.asarray(rgb), pixels)
    grey_rgb = np.asarray(src.load(1))
    assert grey_rgb.shape == (8, 8, 3) and all(
        np.array_equal(grey_rgb[..., c], grey) for c in range(3)
    )


def test_class_names_fix_the_label_order(tree: Path) -> None:
    src = ImageFolder(tree, class_names=["wolf", "dog", "cat"])
    assert src.labels.tolist() == [2, 2, 2, 1]
    with pytest.raises(InvalidInputError, match="not in class_names"):
        ImageFolder(tree, class_names=["cat"])


def test_extensions_filter(tree: Path) -> None:
    assert ImageFolder(tree, extensions=[".png"]).ids == ["cat/a.png", "cat/b.png"]
    assert ImageFolder(tree, extensions=".png").ids == ["cat/a.png", "cat/b.png"]


def test_missing_and_empty_roots(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match=r"root/<class>/<image>"):
        ImageFolder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyInputError, match="no class sub-folders"):
        ImageFolder(tmp_path / "empty")
    (tmp_path / "empty" / "a").mkdir()
    with pytest.raises(EmptyInputError, match="holds no images"):
        ImageFolder(tmp_path / "empty")
    write_image(tmp_path / "flat" / "x.png", 0)
    with pytest.raises(EmptyInputError, match="1 images lie directly in the root"):
        ImageFolder(tmp_path / "flat")


def _corrupt_tree(tmp_path: Path) -> ImageFolder:
    root = tmp_path / "bad"
    write_image(root / "k" / "0_good.jpg", 0, size=64, fmt="JPEG")
    (root / "k" / "1_random.jpg").write_bytes(np.random.default_rng(0).bytes(2000))
    data = (root / "k" / "0_good.jpg").read_bytes()
    (root / "k" / "2_truncated.jpg").write_bytes(data[: len(data) // 2])
    write_image(root / "k" / "3_good.png", 1, size=64)
    png = (root / "k" / "3_good.png").read_bytes()
    (root / "k" / "4_truncated.png").write_bytes(png[: len(png) // 2])
    write_image(root / "k" / "5_gone.png", 2)
    src = ImageFolder(root)
    (root / "k" / "5_gone.png").unlink()
    return src


@pytest.mark.parametrize("lenient_pil", [False, True])
def test_corrupt_truncated_and_missing_files_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lenient_pil: bool
) -> None:
    # LOAD_TRUNCATED_IMAGES=True (set by some libraries process-wide) must not hide truncation
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", lenient_pil)
    src = _corrupt_tree(tmp_path)
    assert src.load(0).size == (64, 64) and src.load(3).size == (64, 64)
    for i in (1, 2, 4, 5):
        with pytest.raises(CorruptImageError, match=src.ids[i].split("/")[1]):
            src.load(i)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is lenient_pil  # the global setting is restored


def test_fingerprint_stable_and_sensitive(tree: Path) -> None:
    a, b = ImageFolder(tree), ImageFolder(tree)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint(mode="content") == b.fingerprint(mode="content")
    assert len(a.fingerprint()) == 64 and a.fingerprint() != a.fingerprint(mode="content")
    before = (a.fingerprint(), a.fingerprint(mode="content"))

    # rewrite one file with different bytes and size
    target = tree / "cat" / "b.png"
    write_image(target, 99, size=9)
    assert a.fingerprint() != before[0] and a.fingerprint(mode="content") != before[1]


def test_content_mode_sees_edits_that_keep_size_and_mtime(tmp_path: Path) -> None:
    target = tmp_path / "r" / "k" / "img.ppm"  # binary PPM: fixed size for fixed dimensions
    write_image(target, 0)
    src = ImageFolder(tmp_path / "r")
    before = (src.fingerprint(), src.fingerprint(mode="content"))
    st = os.stat(target)
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.fingerprint() == before[0]  # documented limit of the cheap default
    assert src.fingerprint(mode="content") != before[1]


def test_fingerprint_changes_with_labels_and_order(tree: Path) -> None:
    base = ImageFolder(tree)
    relabelled = ImageFolder(tree, class_names=["dog", "cat"])
    assert relabelled.ids == base.ids and relabelled.fingerprint() != base.fingerprint()
    assert base.subset([1, 0, 2, 3]).fingerprint() != base.subset([0, 1, 2, 3]).fingerprint()
    with pytest.raises(InvalidInputError, match="fingerprint mode"):
        base.fingerprint(mode="fast")


def test_fingerprint_ignores_where_the_dataset_lives(tree: Path, tmp_path: Path) -> None:
    import shutil

    moved = tmp_path / "elsewhere"
    shutil.copytree(tree, moved, copy_function=shutil.copy2)
    assert ImageFolder(moved).fingerprint(mode="content") == ImageFolder(tree).fingerprint(
        mode="content"
    )


def test_an_ood_folder_is_every_image_below_it_unlabelled(tree: Path, tmp_path: Path) -> None:
    """Issue 23 item 2: an OOD set is usually a flat folder of images ("has no class
    sub-folders" before); a folder of class folders is read the same way, label -1."""
    flat = tmp_path / "flat"
    write_image(flat / "b.png", 1)
    write_image(flat / "a.jpg", 2)
    (flat / "notes.txt").write_text("not an image")
    with pytest.raises(EmptyInputError, match="has no class sub-folders"):
        ImageFolder(flat)
    src = OodFolder(flat)
    assert src.ids == ["a.jpg", "b.png"] and src.labels.tolist() == [-1, -1]
    assert src.name == "flat" and src.load(1).size == (8, 8)
    nested = OodFolder(tree)
    assert nested.ids == ["loose.png", "cat/a.png", "cat/b.png", "cat/sub/c.jpg", "dog/x.JPEG"]
    assert (nested.labels == -1).all()
    assert OodFolder(flat).fingerprint() == src.fingerprint() != nested.fingerprint()
    with pytest.raises(MissingDataError, match="expected a folder of images"):
        OodFolder(tmp_path / "nowhere")
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(EmptyInputError, match="holds no images"):
        OodFolder(tmp_path / "empty")


def test_open_folder_reads_a_flat_folder_as_ood_images_only_when_asked(
    tree: Path, tmp_path: Path
) -> None:
    """Issue 33 item 4: ``flat_ood`` (oodbench extract) reads images without sub-folders as an
    OOD group is read (OodFolder); without it (an experiment's ID source) the ImageFolder error
    still says how to label them, and class folders stay an ImageFolder either way."""
    from oodbench.data import open_folder

    flat = tmp_path / "flat"
    write_image(flat / "b.png", 1)
    write_image(flat / "a.jpg", 2)
    (flat / "notes.txt").write_text("not an image")
    src = open_folder(flat, flat_ood=True)
    assert isinstance(src, OodFolder) and src.fingerprint() == OodFolder(flat).fingerprint()
    assert src.labels.tolist() == [-1, -1]
    with pytest.raises(EmptyInputError, match="2 images lie directly in the root"):
        open_folder(flat)
    assert type(open_folder(tree, flat_ood=True)) is ImageFolder
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "notes.txt").write_text("not an image")
    with pytest.raises(EmptyInputError, match="has no class sub-folders"):
        open_folder(tmp_path / "none", flat_ood=True)
