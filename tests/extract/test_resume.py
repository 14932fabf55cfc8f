"""Interrupted extractions resume from the last complete shard, bit-identical to a clean run.

Bit-identical comparisons here are between extractions in this process (or in a child
process set to the same thread count) over the same batches: the same operations in the same
order, so they hold on any CPU, whose kernels change both sides alike.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from oodbench.extract import extract
from oodbench.extract.runtime import torch_threads
from oodbench.extract.store import ActivationStore
from tests.conftest import REPO
from tests.extract._toy import RandomImages, TinyNet

ALL = ("logits", "features", "feature_map")
FIELDS = (*ALL, "labels", "ids", "source_indices")
N, BATCH, SHARD = 48, 3, 6  # 8 shards of 2 batches
CORRUPT = (4, 31)

_CHILD = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
import torch
torch.set_num_threads(1)
from oodbench.extract import extract
from tests.extract._toy import RandomImages, TinyNet
extract(TinyNet(delay=float(sys.argv[1])), RandomImages({N}, corrupt={CORRUPT}), capture={ALL},
        batch_size={BATCH}, shard_size={SHARD}, progress=False)
"""


def _clean_run(root: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OODBENCH_CACHE", str(root))
    with pytest.warns(UserWarning):
        return extract(TinyNet(), RandomImages(N, corrupt=CORRUPT), capture=ALL,
                       batch_size=BATCH, shard_size=SHARD, progress=False)


def _manifest(root: Path) -> dict | None:
    found = list((root / "activations").glob("*/manifest.json"))
    try:
        return json.loads(found[0].read_text()) if found else None
    except (OSError, ValueError):  # replaced while we read it
        return None


def _kill_when(child: subprocess.Popen, root: Path, ready: Callable[[], object]) -> dict:
    """SIGKILL ``child`` once ``ready()`` returns; the manifest it left (incomplete)."""
    try:
        ready()
        assert child.poll() is None, "the child finished before it could be killed; slow it down"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    manifest = _manifest(root)
    assert manifest is not None and not manifest["complete"]
    return manifest


def _start_and_kill(root: Path, min_shards: int, extra_wait: float) -> dict:
    """Run the child until ``min_shards`` shards are complete, wait ``extra_wait``, SIGKILL it."""
    env = {**os.environ, "OODBENCH_CACHE": str(root), "PYTHONWARNINGS": "ignore"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, "0.08"], env=env)

    def shards_done() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            manifest = _manifest(root)
            if manifest and len(manifest["shards"]) >= min_shards:
                break
            time.sleep(0.005)
        time.sleep(extra_wait)

    return _kill_when(child, root, shards_done)


@pytest.mark.heavy
def test_sigkilled_run_resumes_bit_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with torch_threads(1):  # the same process configuration as the child
        clean = _clean_run(tmp_path / "clean", monkeypatch)
        killed = tmp_path / "killed"
        # killed twice: once right after a shard completed, once between shard writes
        first = _start_and_kill(killed, min_shards=2, extra_wait=0.0)
        second = _start_and_kill(killed, min_shards=len(first["shards"]) + 1, extra_wait=0.13)
        assert 2 <= len(first["shards"]) <= len(second["shards"]) < N // SHARD
        model = TinyNet()
        monkeypatch.setenv("OODBENCH_CACHE", str(killed))
        with pytest.warns(UserWarning):
            resumed = extract(model, RandomImages(N, corrupt=CORRUPT), capture=ALL,
                              batch_size=BATCH, shard_size=SHARD, progress=False)
    remaining = N // SHARD - len(_kept_shards(second))
    assert model.calls == remaining * SHARD // BATCH  # only the missing shards were computed
    assert not resumed.meta["cache_hit"]
    for name in FIELDS:
        assert np.array_equal(getattr(resumed, name), getattr(clean, name)), name
    assert resumed.meta["skipped"] == clean.meta["skipped"]
    assert resumed.meta["cache_key"] == clean.meta["cache_key"]


def _kept_shards(manifest: dict) -> list[str]:
    return sorted(manifest["shards"])


class _Interrupt(TinyNet):
    def forward_feature_map(self, x):
        if self.calls == 5:
            raise KeyboardInterrupt
        return super().forward_feature_map(x)


def test_ctrl_c_keeps_completed_shards(cache_root: Path):
    source = RandomImages(12)
    with pytest.raises(KeyboardInterrupt, match="2 of 3 shards of the extraction are kept"):
        extract(_Interrupt(), source, batch_size=2, shard_size=4, progress=False)
    (folder,) = (cache_root / "activations").iterdir()
    assert sorted(json.loads((folder / "manifest.json").read_text())["shards"]) == ["0", "1"]
    model = TinyNet()
    resumed = extract(model, source, batch_size=2, shard_size=4, progress=False)
    assert model.calls == 2
    assert (resumed.meta["n_cached"], resumed.meta["n_computed"]) == (2 * 4, 12 - 2 * 4)  # 2 kept shards
    clean = extract(TinyNet(), source, batch_size=2, shard_size=4, cache=False, progress=False)
    np.testing.assert_array_equal(resumed.logits, clean.logits)
    np.testing.assert_array_equal(resumed.features, clean.features)


def test_crash_during_finalize_resumes(cache_root: Path, monkeypatch: pytest.MonkeyPatch):
    source = RandomImages(10)
    original = ActivationStore._write_concatenated
    calls = []

    def crash_after_first_file(self, name, parts, rows):
        if calls:
            raise RuntimeError("simulated crash")
        calls.append(name)
        return original(self, name, parts, rows)

    monkeypatch.setattr(ActivationStore, "_write_concatenated", crash_after_first_file)
    with pytest.raises(RuntimeError, match="simulated"):
        extract(TinyNet(), source, capture=ALL, batch_size=3, shard_size=3, progress=False)
    monkeypatch.setattr(ActivationStore, "_write_concatenated", original)
    model = TinyNet()
    resumed = extract(model, source, capture=ALL, batch_size=3, shard_size=3, progress=False)
    assert model.calls == 0  # every shard was complete: only the concatenation was redone
    clean = extract(TinyNet(), source, capture=ALL, batch_size=3, shard_size=3, cache=False,
                    progress=False)
    for name in FIELDS:
        assert np.array_equal(getattr(resumed, name), getattr(clean, name)), name


def test_damaged_or_half_written_shards_are_recomputed(cache_root: Path):
    source = RandomImages(12)
    with pytest.raises(KeyboardInterrupt):
        extract(_Interrupt(), source, batch_size=2, shard_size=4, progress=False)
    (folder,) = (cache_root / "activations").iterdir()
    logits = folder / "shards" / "000001" / "logits.npy"
    data = bytearray(logits.read_bytes())
    data[-1] ^= 0xFF
    logits.write_bytes(bytes(data))  # shard 1 no longer matches its checksum
    (folder / "shards" / "000002").mkdir()
    (folder / "shards" / "000002" / ".logits.npy.123.tmp").write_bytes(b"half")  # killed writer
    model = TinyNet()
    resumed = extract(model, source, batch_size=2, shard_size=4, progress=False)
    assert model.calls == 4  # shards 1 and 2 (2 batches each); shard 0 was intact
    clean = extract(TinyNet(), source, batch_size=2, shard_size=4, cache=False, progress=False)
    np.testing.assert_array_equal(resumed.logits, clean.logits)


_EARLY_CHILD = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
import torch
torch.set_num_threads(1)
try:  # shards of about 0.3 s of work instead of 10 s, to keep the test short
    from oodbench.extract import sharding
    sharding.SHARD_SECONDS = 0.3
except ImportError:  # a version without measured shards
    pass
from oodbench.extract import extract
from tests.extract._toy import RandomImages, TinyNet
model, source = TinyNet(delay=0.1), RandomImages({N})
print("start", flush=True)
extract(model, source, capture={ALL}, batch_size=2, progress=False)
"""


@pytest.mark.heavy
def test_a_kill_early_in_the_first_extraction_keeps_its_first_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Default shard sizes: killed after about 1 s of work (three shard targets; the old fixed
    16-batch shards took 1.6 s), the run keeps shards and resumes bit-identical."""
    root = tmp_path / "cache"
    env = {**os.environ, "OODBENCH_CACHE": str(root), "PYTHONWARNINGS": "ignore"}
    child = subprocess.Popen([sys.executable, "-c", _EARLY_CHILD], env=env,
                             stdout=subprocess.PIPE, text=True)

    def one_second_into_the_pass() -> None:
        assert child.stdout is not None and child.stdout.readline().strip() == "start"
        time.sleep(1.0)

    manifest = _kill_when(child, root, one_second_into_the_pass)
    kept = len(manifest["shards"])
    assert kept >= 1, "a kill 1 s into the pass lost every image"
    size = manifest["shard_size"]
    assert size % 2 == 0 and size < 32  # whole batches, well below the old 16 batches
    with torch_threads(1):
        monkeypatch.setenv("OODBENCH_CACHE", str(root))
        model = TinyNet()
        resumed = extract(model, RandomImages(N), capture=ALL, batch_size=2, progress=False)
        clean = extract(TinyNet(), RandomImages(N), capture=ALL, batch_size=2, cache=False,
                        progress=False)
    assert model.calls == (N - sum(r["rows"] for r in manifest["shards"].values())) // 2
    for name in FIELDS:
        assert np.array_equal(getattr(resumed, name), getattr(clean, name)), name
