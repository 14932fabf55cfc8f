"""Shards sized by time and memory: the measured first batch, whole batches, the same numbers.

Bit-identical comparisons here are between extractions in this process (or in a child
process set to the same thread count) over the same batches: the same operations in the same
order, so they hold on any CPU, whose kernels change both sides alike.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from oodbench.errors import InvalidInputError
from oodbench.extract import extract, sharding
from oodbench.extract.sharding import measured_shard_size, shard_bounds
from tests.extract._toy import RandomImages, TinyNet

ALL = ("logits", "features", "feature_map")


def _manifest(acts) -> dict:
    return json.loads((Path(acts.meta["cache_path"]) / "manifest.json").read_text())


def test_measured_size_follows_the_formula():
    # 0.5 s per image, 10 s per shard -> 20 images -> 2 whole batches of 8 = 16
    assert measured_shard_size(1_000, 8, 0.5, 1_000.0) == 16
    # bytes win: 256 MiB / 2 MiB per row = 128 images
    assert measured_shard_size(10_000, 8, 1e-6, 2 * 2**20) == 128
    # a long, slow source: at most about MAX_SHARDS shards (n / 256 = 3906.25 -> 3904)
    assert measured_shard_size(1_000_000, 64, 0.5, 4.0) == 1_000_000 // 256 // 64 * 64
    # a fast pass: one shard when the whole source takes less than SHARD_SECONDS
    assert measured_shard_size(1_000_001, 64, 1e-9, 4.0) == math.ceil(1_000_001 / 64) * 64
    # at least one batch, at most the whole source in whole batches
    assert measured_shard_size(100, 16, 60.0, 4.0) == 16
    assert measured_shard_size(100, 16, 1e-9, 4.0) == math.ceil(100 / 16) * 16
    assert shard_bounds(10, 4) == [(0, 0, 4), (1, 4, 8), (2, 8, 10)]


def test_default_shards_are_measured_and_give_the_same_arrays(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sharding, "SHARD_SECONDS", 0.25)
    source = RandomImages(30, corrupt=(1, 17))
    model = TinyNet(delay=0.05)  # >= 0.05 s per batch of 3: shards of at most 5 batches
    with pytest.warns(UserWarning):
        measured = extract(model, source, capture=ALL, batch_size=3, progress=False)
    manifest = _manifest(measured)
    size = manifest["shard_size"]
    assert size % 3 == 0 and 3 <= size <= 15 and manifest["n_shards"] == math.ceil(30 / size)
    sizing = manifest["shard_sizing"]
    assert sizing["first_batch_images"] == 3 and sizing["target_s"] == 0.25
    assert sizing["first_batch_s"] >= 0.05
    assert model.calls == 10  # the measured first batch is not computed twice
    with pytest.warns(UserWarning):
        plain = extract(TinyNet(), source, capture=ALL, batch_size=3, cache=False, progress=False)
    for name in (*ALL, "labels", "ids", "source_indices"):
        assert np.array_equal(getattr(measured, name), getattr(plain, name)), name
    assert measured.meta["skipped"] == plain.meta["skipped"]


def test_memory_bounds_the_shard(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sharding, "SHARD_BYTES", 1)  # every row is bigger: one batch per shard
    acts = extract(TinyNet(), RandomImages(10), capture=ALL, batch_size=4, progress=False)
    manifest = _manifest(acts)
    assert manifest["shard_size"] == 4 and manifest["n_shards"] == 3
    assert manifest["shard_sizing"]["bytes_per_row"] == pytest.approx(
        sum(getattr(acts, n)[0].nbytes for n in ALL) + 8)  # + the int64 source index


def test_a_one_batch_source_and_bad_sizes():
    acts = extract(TinyNet(), RandomImages(2), batch_size=4, progress=False)
    assert _manifest(acts)["shard_size"] == 4 and len(acts) == 2
    for bad in (0, -3, 2.5, True, "30s"):
        with pytest.raises(InvalidInputError, match="shard_size must be a positive number"):
            extract(TinyNet(), RandomImages(2), shard_size=bad, progress=False)
