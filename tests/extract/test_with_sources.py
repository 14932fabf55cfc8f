"""extract() on the real sources of oodbench.data: image folders with broken files, arrays."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from oodbench.data import ArraySource, ImageFolder
from oodbench.extract import SkippedImagesWarning, extract
from tests._tolerance import assert_within
from tests.extract._toy import TinyNet, forward_bounds, reference_forward


def _image(seed: int, size: int = 10) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), np.uint8))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir(parents=True)
        for i in range(4):
            _image(10 * c + i).save(root / cls / f"{i}.png")
    (root / "cat" / "9_garbage.png").write_bytes(b"this is not a png")
    buffer = io.BytesIO()
    _image(99, size=64).save(buffer, format="JPEG")
    (root / "dog" / "9_truncated.jpg").write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return root


def test_corrupt_and_truncated_files_are_skipped_and_reported(folder: Path):
    source = ImageFolder(folder)
    assert len(source) == 10
    with pytest.warns(SkippedImagesWarning, match="skipped 2 of 10") as record:
        acts = extract(TinyNet(num_classes=2), source, batch_size=3, shard_size=4, progress=False)
    assert len(record) == 1
    skipped = {s["id"]: s for s in acts.meta["skipped"]}
    assert set(skipped) == {"cat/9_garbage.png", "dog/9_truncated.jpg"}
    assert skipped["dog/9_truncated.jpg"]["path"] == str(folder / "dog" / "9_truncated.jpg")
    assert all("CorruptImageError" in s["reason"] for s in skipped.values())
    good = [i for i, name in enumerate(source.ids) if "9_" not in name]
    np.testing.assert_array_equal(acts.source_indices, good)
    np.testing.assert_array_equal(acts.ids, [source.ids[i] for i in good])
    np.testing.assert_array_equal(acts.labels, [0, 0, 0, 0, 1, 1, 1, 1])
    ref = reference_forward(TinyNet(num_classes=2), source, good)
    bound = forward_bounds(TinyNet(num_classes=2), source, good)["logits"]  # batches of 3 or 1
    assert_within(acts.logits, ref["logits"], bound)


def test_a_changed_file_changes_the_fingerprint_and_is_extracted_again(folder: Path):
    with pytest.warns(SkippedImagesWarning):
        before = extract(TinyNet(num_classes=2), ImageFolder(folder), progress=False)
    target = folder / "dog" / "2.png"
    _image(1234).save(target)
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a visibly newer file
    model = TinyNet(num_classes=2)
    with pytest.warns(SkippedImagesWarning):
        after = extract(model, ImageFolder(folder), progress=False)
    assert after.meta["source_fingerprint"] != before.meta["source_fingerprint"]
    assert after.meta["cache_key"] != before.meta["cache_key"] and model.calls > 0
    row = list(after.ids).index("dog/2.png")
    assert not np.array_equal(after.logits[row], before.logits[row])
    others = np.arange(len(after)) != row
    np.testing.assert_array_equal(after.logits[others], before.logits[others])


def test_array_source():
    images = np.random.default_rng(0).integers(0, 256, (7, 9, 9, 3), dtype=np.uint8)
    source = ArraySource(images, [0, 1, 2, -1, 0, 1, 2], name="arr")
    acts = extract(TinyNet(), source, capture=("features",), batch_size=4, progress=False)
    ref = reference_forward(TinyNet(), source, range(7))
    bound = forward_bounds(TinyNet(), source, range(7))["features"]  # batches of 4 or 1
    assert_within(acts.features, ref["features"], bound)
    np.testing.assert_array_equal(acts.labels, [0, 1, 2, -1, 0, 1, 2])
    assert list(acts.ids) == [f"arr:{i}" for i in range(7)]
    assert not acts.correct[3]  # label -1 is never correct


class _WnidNet(TinyNet):
    """TinyNet with 5 outputs whose classes are the first five ImageNet-1k wnids."""

    def __init__(self):
        super().__init__(num_classes=5)
        from oodbench.data.imagenet import imagenet1k_wnids, lemmas

        self.class_wnids = imagenet1k_wnids()[:5]
        self.class_names = [lemmas(w) for w in self.class_wnids]


def test_class_folders_named_by_the_model_classes_get_its_class_indices(tmp_path: Path):
    from oodbench.data.imagenet import imagenet1k_wnids

    wnids = imagenet1k_wnids()
    for i, folder in enumerate([wnids[4], wnids[1], "tench"]):
        (tmp_path / folder).mkdir()
        for j in range(2):
            _image(10 * i + j).save(tmp_path / folder / f"{j}.png")
    source = ImageFolder(tmp_path)  # sorted: n01443537 (goldfish), n01494475 (hammerhead), tench
    assert list(source.labels) == [0, 0, 1, 1, 2, 2]
    acts = extract(_WnidNet(), source, progress=False)
    assert list(acts.labels) == [1, 1, 4, 4, 0, 0]  # the model's indices of those classes
    assert acts.meta["label_mapping"] == {"n01443537": 1, "n01494475": 4, "tench": 0}
    assert acts.source.class_names == wnids[:5]
    np.testing.assert_array_equal(acts.correct, acts.logits.argmax(1) == acts.labels)
