"""Activations: row views of memory-mapped arrays, releasing their pages, class restriction."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations


def _memmapped(folder: Path, n: int, classes: int) -> Activations:
    rng = np.random.default_rng(0)
    np.save(folder / "logits.npy", rng.normal(size=(n, classes)).astype(np.float32))
    np.save(folder / "labels.npy", rng.integers(0, classes, n))
    return Activations(logits=np.load(folder / "logits.npy", mmap_mode="r"),
                       labels=np.load(folder / "labels.npy", mmap_mode="r"),
                       ids=np.arange(n).astype(str))


def test_rows_are_views_of_the_memory_map(tmp_path):
    acts = _memmapped(tmp_path, 100, 4)
    part = acts.rows(slice(10, 30))
    assert len(part) == 20 and isinstance(part.logits, np.memmap)
    assert np.shares_memory(part.logits, acts.logits)
    np.testing.assert_array_equal(part.logits, acts.logits[10:30])
    np.testing.assert_array_equal(part.source_indices, np.arange(10, 30))
    with pytest.raises(InvalidInputError, match="step 1"):
        acts.rows(slice(0, 10, 2))


def _resident_file_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_release_pages_drops_the_touched_file_pages(tmp_path):
    acts = _memmapped(tmp_path, 8192, 1024)  # 32 MiB of float32 logits
    before = _resident_file_kib()
    assert float(np.asarray(acts.logits, dtype=np.float64).sum()) != 0.0  # touch every page
    touched = _resident_file_kib()
    acts.release_pages()
    released = _resident_file_kib()
    assert touched - before > 16 * 1024  # the 32 MiB were resident ...
    assert touched - released > 16 * 1024  # ... and are not any more
    np.testing.assert_array_equal(acts.logits[:2], np.load(tmp_path / "logits.npy")[:2])  # readable


def test_restrict_classes_sends_labels_outside_the_model_to_minus_one():
    acts = Activations(logits=np.zeros((4, 3)), labels=np.array([0, 2, 7, -1]), ids=np.arange(4))
    np.testing.assert_array_equal(acts.restrict_classes([2, 0]).labels, [1, 0, -1, -1])
