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
