"""``oodbench extract MODEL_SPEC PATH`` on a tiny timm model and a small image folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from oodbench.cli.main import main
from oodbench.extract import SkippedImagesWarning, list_cache


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "imgs" / cls / f"{i}.png")
    (tmp_path / "imgs" / "b" / "broken.png").write_bytes(b"not an image")
    return tmp_path / "imgs"


def test_extract_writes_the_cache_then_hits_it(folder: Path):
    args = ["extract", "timm:test_resnet", str(folder), "--random-init", "-b", "4",
            "-c", "logits,features", "--capture", "feature_map", "--no-progress"]
    runner = CliRunner()
    with pytest.warns(SkippedImagesWarning, match="b/broken.png"):
        first = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert first.exit_code == 0, first.output
    assert "written" in first.output and "6 of 7 images" in first.output
    (entry,) = list_cache()
    assert entry["complete"] and entry["n"] == 6 and entry["skipped"] == 1
    assert entry["capture"] == ["feature_map", "features", "logits"]
    assert entry["key"] in first.output
    with pytest.warns(SkippedImagesWarning):
        second = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert second.exit_code == 0 and "hit (no forward pass)" in second.output


def test_unknown_capture_is_a_friendly_error(folder: Path):
    result = CliRunner().invoke(
        main, ["extract", "timm:test_resnet", str(folder), "--random-init", "-c", "logit"]
    )
    assert result.exit_code == 2 and "unknown activation to capture 'logit'" in result.output


def test_shard_size_and_repair_options(folder: Path):
    import json

    args = ["extract", "timm:test_resnet", str(folder), "--random-init", "-b", "2",
            "--shard-size", "2", "--no-progress"]
    runner = CliRunner()
    with pytest.warns(SkippedImagesWarning):
        first = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert first.exit_code == 0, first.output
    (entry,) = list_cache()
    manifest = json.loads((Path(entry["path"]) / "manifest.json").read_text())
    assert manifest["shard_size"] == 2 and manifest["n_shards"] == 4
    logits = np.load(Path(entry["path"]) / "logits.npy", mmap_mode="r+")
    logits[0, 0] += 1.0  # the same size, another number
    logits.flush()
    del logits
    damaged = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert damaged.exit_code == 2
    assert "logits.npy does not match its checksum" in damaged.output
    assert "--repair" in damaged.output
    with pytest.warns(SkippedImagesWarning):
        repaired = runner.invoke(main, [*args, "--repair"], env={"COLUMNS": "200"})
    assert repaired.exit_code == 0, repaired.output
    assert "written" in repaired.output and "deleting the damaged cache entry" in repaired.output


def test_a_folder_of_images_with_a_labels_file_gets_those_labels(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(1)
    (tmp_path / "set" / "images").mkdir(parents=True)
    labels = {f"img_{i}.png": int(rng.integers(0, 1000)) for i in range(5)}
    for name in labels:
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
            tmp_path / "set" / "images" / name)
    (tmp_path / "set" / "labels.txt").write_text("".join(f"{n} {c}\n" for n, c in labels.items()))
    result = CliRunner().invoke(main, ["extract", "timm:test_resnet", str(tmp_path / "set"),
                                       "--random-init", "--no-progress"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "top-1 accuracy" in result.output
    (entry,) = list_cache()
    assert entry["key"] in result.output and "…" not in result.output  # whole, when piped
    stored = np.load(Path(entry["path"]) / "labels.npy")
    ids = np.load(Path(entry["path"]) / "ids.npy")
    assert dict(zip(ids.tolist(), stored.tolist())) == labels  # not every label 0


@pytest.mark.heavy
def test_real_imagenet_images_in_both_layouts_give_the_real_accuracy(
    lite0_imagenet_val, tmp_path: Path, imagenet_val_1300: Path
):
    """EfficientNet-Lite0 on the real validation images: as images/ + labels.txt, and as an
    ImageFolder of wnid folders (a subset); both give the model's real top-1 accuracy."""
    from oodbench.data.imagenet import imagenet1k_wnids

    _, source, acts = lite0_imagenet_val
    accuracy = float(acts.correct.mean())
    assert accuracy > 0.6
    flat = CliRunner().invoke(main, ["extract", "efficientnet_lite0", str(imagenet_val_1300),
                                     "--no-progress"], env={"COLUMNS": "200"})
    assert flat.exit_code == 0, flat.output
    assert "hit (no forward pass)" in flat.output  # the session's extraction holds more
    assert f"{accuracy:.4f} ({len(acts)} labelled images)" in flat.output
    # 40 images of 10 classes as wnid folders (links to the real files)
    wnids = imagenet1k_wnids()
    labels = np.asarray(source.labels)
    chosen = [c for c in np.unique(labels) if (labels == c).sum() >= 2][:10]
    root = tmp_path / "wnid-folders"
    expected = []
    for c in chosen:
        (root / wnids[c]).mkdir(parents=True)
        for i in np.flatnonzero(labels == c)[:4]:
            (root / wnids[c] / Path(source.ids[i]).name).symlink_to(source.path(i))
            expected.append(bool(acts.correct[list(acts.source_indices).index(i)]))
    result = CliRunner().invoke(main, ["extract", "efficientnet_lite0", str(root), "--no-progress"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "10 classes of ImageFolder mapped onto the model's class indices" in result.output
    assert f"{np.mean(expected):.4f} ({len(expected)} labelled images)" in result.output


def test_a_resumed_extraction_says_how_many_images_came_from_the_cache(
    folder: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 33 item 2: interrupted after two shards of one image pair each, the second run reads
    those images from the cache and computes the rest; the output gives both counts."""
    import json

    from oodbench.cli.main import EXIT_INTERRUPTED
    from oodbench.extract.forward import ForwardPass

    args = ["extract", "timm:test_resnet", str(folder), "--random-init", "-b", "2",
            "--shard-size", "2", "--no-progress"]
    forward, calls = ForwardPass._forward, []

    def ctrl_c_at_the_third_batch(self, batch, ids):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return forward(self, batch, ids)

    runner = CliRunner()
    with monkeypatch.context() as patch:
        patch.setattr(ForwardPass, "_forward", ctrl_c_at_the_third_batch)
        first = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert first.exit_code == EXIT_INTERRUPTED, first.output
    (entry,) = list_cache()
    manifest = json.loads((Path(entry["path"]) / "manifest.json").read_text())
    n = manifest["source"]["n"]
    kept = len(manifest["shards"]) * manifest["shard_size"]  # whole shards of 2: not the last one
    assert 0 < kept < n
    with pytest.warns(SkippedImagesWarning):
        resumed = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert resumed.exit_code == 0, resumed.output
    assert (f"written, resumed: {kept} images read from the cache, {n - kept} computed"
            in resumed.output)
    with pytest.warns(SkippedImagesWarning):
        again = runner.invoke(main, args, env={"COLUMNS": "200"})
    assert "hit (no forward pass)" in again.output and "computed" not in again.output


def test_a_flat_folder_of_images_is_extracted_as_run_reads_an_ood_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 33 item 4: extract refused a flat folder of images that `oodbench run` takes as an
    OOD group. It reads it as run does (unlabelled, OodFolder), so run's extraction is a hit."""
    import torch

    from oodbench.data.spec import OodSourceSpec
    from oodbench.extract import extract
    from oodbench.models import load
    from oodbench.run.build import build_source

    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache"))
    flat = tmp_path / "flat"
    flat.mkdir()
    rng = np.random.default_rng(2)
    count = 4
    for i in range(count):
        Image.fromarray(rng.integers(0, 256, (18, 18, 3), dtype=np.uint8)).save(flat / f"{i}.png")
    result = CliRunner().invoke(main, ["extract", "timm:test_resnet", str(flat), "--random-init",
                                       "-b", "2", "--no-progress"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"{count} of {count} images" in result.output
    assert f"written ({count} images computed)" in result.output
    assert "top-1 accuracy" not in result.output  # no labels, no accuracy
    (entry,) = list_cache()
    assert entry["n"] == count and entry["key"] in result.output
    assert (np.load(Path(entry["path"]) / "labels.npy") == -1).all()
    torch.manual_seed(0)  # the CLI's random-init weights
    model = load("timm:test_resnet", pretrained=False)
    source = build_source(OodSourceSpec.model_validate({"folder": str(flat)}))
    again = extract(model, source, batch_size=2, progress=False)
    assert again.meta["cache_hit"] and again.meta["cache_key"] == entry["key"]
