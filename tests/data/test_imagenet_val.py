"""ImageNet validation as a Source: every label layout, the ways they go wrong, the real images."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy.io import savemat

from oodbench.data.imagenet import imagenet1k_wnids
from oodbench.data.imagenet_val import ImageNetVal, discover
from oodbench.errors import CorruptImageError, DataError, MissingDataError

WNIDS = imagenet1k_wnids()


def val_name(k: int) -> str:
    return f"ILSVRC2012_val_{k:08d}.JPEG"


def write_image(path: Path, value: int = 100) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (6, 5), (value, 50, 200)).save(path, format="JPEG")


def flat_folder(root: Path, ks: list[int]) -> Path:
    for k in ks:
        write_image(root / val_name(k), value=k)
    return root


def test_flat_folder_with_labels_txt(tmp_path: Path) -> None:
    flat_folder(tmp_path / "images", [3, 1, 2])
    (tmp_path / "labels.txt").write_text(f"{val_name(1)} 7\n{val_name(2)} 0\n{val_name(3)} 999\n")
    val = ImageNetVal(tmp_path)
    assert val.ids == [val_name(1), val_name(2), val_name(3)]  # sorted by name
    assert val.labels.tolist() == [7, 0, 999]
    assert val.class_names[7] == WNIDS[7] and len(val.class_names) == 1000
    assert val.load(2).mode == "RGB" and val.load(2).size == (6, 5)
    assert "labels.txt" in val.label_source
    assert not val.labels.flags.writeable


def test_labels_may_name_wnids_and_carry_folders(tmp_path: Path) -> None:
    flat_folder(tmp_path / "val", [1, 2])
    labels = tmp_path / "my_labels.txt"
    labels.write_text(f"imagenet_1k/val/{val_name(1)} {WNIDS[5]}\nval/{val_name(2)} 12\n")
    val = ImageNetVal(tmp_path, labels=labels)
    assert val.labels.tolist() == [5, 12]


def test_flat_folder_without_labels_says_how_to_fix(tmp_path: Path) -> None:
    flat_folder(tmp_path, [1, 2, 3])
    with pytest.raises(MissingDataError) as err:
        ImageNetVal(tmp_path)
    text = str(err.value)
    assert "3 flat validation images but no labels" in text
    assert "labels.txt" in text and "ILSVRC2012_devkit_t12" in text and "valprep" in text


def test_labels_for_missing_images_fail_loudly(tmp_path: Path) -> None:
    flat_folder(tmp_path, [1])
    (tmp_path / "labels.txt").write_text(f"{val_name(1)} 1\n{val_name(2)} 2\n")
    with pytest.raises(MissingDataError, match="lists 1 images that are not in"):
        ImageNetVal(tmp_path)


@pytest.mark.parametrize(
    "line, message",
    [("x.JPEG 1000", "outside 0-999"), ("x.JPEG n99999999", "not one of the 1000"), ("x.JPEG", "expected")],
)
def test_bad_label_lines(tmp_path: Path, line: str, message: str) -> None:
    flat_folder(tmp_path, [1])
    (tmp_path / "labels.txt").write_text(line + "\n")
    with pytest.raises(DataError, match=message):
        ImageNetVal(tmp_path)


def test_synset_words_in_another_order_is_refused(tmp_path: Path) -> None:
    flat_folder(tmp_path, [1])
    (tmp_path / "labels.txt").write_text(f"{val_name(1)} 0\n")
    swapped = [WNIDS[1], WNIDS[0], *WNIDS[2:]]
    (tmp_path / "synset_words.txt").write_text("".join(f"{w} name\n" for w in swapped))
    with pytest.raises(DataError, match="line 1 holds"):
        ImageNetVal(tmp_path)
    (tmp_path / "synset_words.txt").write_text("".join(f"{w} name\n" for w in WNIDS))
    assert ImageNetVal(tmp_path).labels.tolist() == [0]


def test_class_folder_layout(tmp_path: Path) -> None:
    write_image(tmp_path / WNIDS[3] / val_name(9))
    write_image(tmp_path / WNIDS[998] / val_name(4))
    val = ImageNetVal(tmp_path)
    assert val.ids == [f"{WNIDS[3]}/{val_name(9)}", f"{WNIDS[998]}/{val_name(4)}"]
    assert val.labels.tolist() == [3, 998]  # the index among all 1000, not among present folders
    assert val.label_source == "class folders"


def test_class_folders_that_are_not_imagenet_1k(tmp_path: Path) -> None:
    write_image(tmp_path / "n99999999" / val_name(1))
    with pytest.raises(DataError, match="not ImageNet-1k wnids"):
        ImageNetVal(tmp_path)


def test_kaggle_solution_csv(tmp_path: Path) -> None:
    flat_folder(tmp_path / "val", [1, 2])
    (tmp_path / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n"
        f"ILSVRC2012_val_00000002,{WNIDS[42]} 1 2 3 4 {WNIDS[42]} 5 6 7 8\n"
        f"ILSVRC2012_val_00000001,{WNIDS[7]} 1 2 3 4\n"
        f"ILSVRC2012_val_00000003,{WNIDS[9]} 1 2 3 4\n"  # not present: ignored
    )
    assert ImageNetVal(tmp_path).labels.tolist() == [7, 42]


def write_devkit(folder: Path, id_of_wnid: dict[str, int], truth: list[int]) -> Path:
    """A minimal ILSVRC-2012 devkit: meta.mat (leaves + one non-leaf) and the ground truth."""
    data = folder / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "wordnet_height", "num_train_images"]
    records = np.zeros((len(id_of_wnid) + 1,), dtype=[(f, "O") for f in fields])
    for i, (wnid, ilsvrc_id) in enumerate(id_of_wnid.items()):
        records[i] = (ilsvrc_id, wnid, "words", "gloss", 0, 0, 1300)
    records[-1] = (1001, "n00001740", "entity", "gloss", 5, 18, 0)
    savemat(data / "meta.mat", {"synsets": records.reshape(-1, 1)})
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{t}\n" for t in truth))
    return folder / "ILSVRC2012_devkit_t12"


@pytest.fixture
def devkit_case(tmp_path: Path) -> tuple[Path, list[int]]:
    """Devkit IDs deliberately NOT in sorted-wnid order; returns (root, expected labels)."""
    rng = np.random.default_rng(0)
    ids = rng.permutation(1000) + 1  # ILSVRC2012_ID of the k-th sorted wnid
    id_of_wnid = {w: int(i) for w, i in zip(WNIDS, ids)}
    truth = [int(ids[c]) for c in (17, 400, 999, 0)]  # images 1..4 are of these sorted classes
    write_devkit(tmp_path, id_of_wnid, truth)
    flat_folder(tmp_path / "val", [1, 2, 3])  # image 4 is absent
    return tmp_path, [17, 400, 999]


def test_devkit_folder_maps_ilsvrc_ids_to_sorted_indices(devkit_case: tuple[Path, list[int]]) -> None:
    root, expected = devkit_case
    val = ImageNetVal(root / "val")
    assert val.labels.tolist() == expected
    assert "devkit" in val.label_source


def test_devkit_archive(devkit_case: tuple[Path, list[int]], tmp_path: Path) -> None:
    root, expected = devkit_case
    archive = tmp_path / "elsewhere" / "ILSVRC2012_devkit_t12.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root / "ILSVRC2012_devkit_t12", arcname="ILSVRC2012_devkit_t12")
    val = ImageNetVal(root / "val", devkit=archive)
    assert val.labels.tolist() == expected


def test_archive_instead_of_folder(tmp_path: Path) -> None:
    flat_folder(tmp_path / "src", [1])
    archive = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "src" / val_name(1), arcname=val_name(1))
    with pytest.raises(DataError, match="is an archive") as err:
        discover(archive)
    assert err.value.kind == "not-extracted"


def test_nested_one_folder_too_deep(tmp_path: Path) -> None:
    flat_folder(tmp_path / "ILSVRC2012" / "valimages", [1])
    with pytest.raises(MissingDataError, match="pass .*valimages instead") as err:
        discover(tmp_path)
    assert err.value.kind == "nested"


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match="does not exist"):
        ImageNetVal(tmp_path / "nope")


def test_corrupt_image_raises_corrupt_image_error(tmp_path: Path) -> None:
    flat_folder(tmp_path, [1])
    (tmp_path / val_name(2)).write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (tmp_path / "labels.txt").write_text(f"{val_name(1)} 1\n{val_name(2)} 2\n")
    val = ImageNetVal(tmp_path)
    with pytest.raises(CorruptImageError, match=val_name(2)):
        val.load(1)


def test_fingerprint_changes_with_labels(tmp_path: Path) -> None:
    flat_folder(tmp_path, [1, 2])
    (tmp_path / "labels.txt").write_text(f"{val_name(1)} 1\n{val_name(2)} 2\n")
    before = ImageNetVal(tmp_path).fingerprint()
    assert ImageNetVal(tmp_path).fingerprint() == before
    (tmp_path / "labels.txt").write_text(f"{val_name(1)} 1\n{val_name(2)} 3\n")
    assert ImageNetVal(tmp_path).fingerprint() != before
    assert ImageNetVal(tmp_path).subset([1]).labels.tolist() == [3]


# -- the real 1,300 ILSVRC-2012 validation images of ../shared/data ---------------------------
def test_real_validation_images_with_labels_mapped_correctly(imagenet_val_1300: Path) -> None:
    from timm.data import ImageNetInfo

    val = ImageNetVal(imagenet_val_1300)
    listed = dict(line.split() for line in (imagenet_val_1300 / "labels.txt").read_text().splitlines())
    assert len(val) == len(listed) == 1300
    assert sorted(val.ids) == val.ids == sorted(listed)
    rng = np.random.default_rng(1)
    timm_info = ImageNetInfo()
    words = (imagenet_val_1300 / "synset_words.txt").read_text().splitlines()
    descriptions = val.descriptions
    for i in rng.choice(len(val), size=25, replace=False):
        label = int(val.labels[i])
        assert label == int(listed[val.ids[i]])
        wnid = val.class_names[label]
        assert wnid == timm_info.index_to_label_name(label) == words[label].split()[0]
        assert descriptions[label].split(",")[0] == timm_info.index_to_description(label).split(",")[0]
    image = val.load(0)
    assert image.mode == "RGB" and image.size == (227, 227)
    assert np.unique(val.labels).size == 725
